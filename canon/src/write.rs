//! Canonical strings and object member order.

/// Writes `s` as a JCS string: `"` and `\` escaped, the short escapes for \b \t \n \f \r,
/// other controls as lowercase `\u00xx`, everything else as raw UTF-8 (`/` and DEL too).
pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Sorts object members by their keys' UTF-16 code units (not bytes, not code points) and
/// keeps the last of duplicate keys, as `jsonb`, `serde_json` and `JSON.parse` do.
/// `members` holds (key, canonical value) in input order.
pub(crate) fn write_object<K: AsRef<str>>(mut members: Vec<(K, String)>, out: &mut String) {
    // A stable sort keeps duplicates in input order, so the last of each run wins. Keys
    // are mostly ASCII, where UTF-16 order is byte order.
    members.sort_by(|a, b| {
        let (a, b) = (a.0.as_ref(), b.0.as_ref());
        if a.is_ascii() && b.is_ascii() {
            a.cmp(b)
        } else {
            a.encode_utf16().cmp(b.encode_utf16())
        }
    });
    out.push('{');
    let mut first = true;
    for i in 0..members.len() {
        if i + 1 < members.len() && members[i + 1].0.as_ref() == members[i].0.as_ref() {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        write_string(members[i].0.as_ref(), out);
        out.push(':');
        out.push_str(&members[i].1);
    }
    out.push('}');
}
