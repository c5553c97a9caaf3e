//! Lossless numbers: a JSON number's exact decimal value, written in ECMAScript's layout.

/// The canonical form of a JSON number literal (RFC 8259 grammar, already checked by the
/// caller): its significant digits in the layout of ECMAScript's `Number::toString`.
/// `1.0`, `1.00` and `1e0` are `1`; `-0` is `0`; `1e400` is `1e+400`.
pub fn canonical_number(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len() + 4);
    write_number(literal, &mut out);
    out
}

pub(crate) fn write_number(literal: &str, out: &mut String) {
    let bytes = literal.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let body = if negative { &bytes[1..] } else { bytes };
    let (mantissa, exponent) = match body.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (&body[..i], parse_exponent(&body[i + 1..])),
        None => (body, 0),
    };
    let (int_part, frac_part) = match mantissa.iter().position(|&b| b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[..0]),
    };
    // value = 0.DIGITS x 10^point, with DIGITS free of leading and trailing zeros.
    let all = int_part.iter().chain(frac_part.iter());
    let leading = all.clone().take_while(|&&b| b == b'0').count();
    let total = int_part.len() + frac_part.len();
    if leading == total {
        out.push('0');
        return;
    }
    let trailing = frac_part
        .iter()
        .rev()
        .chain(int_part.iter().rev())
        .take_while(|&&b| b == b'0')
        .count();
    let digits: Vec<u8> = all
        .skip(leading)
        .take(total - leading - trailing)
        .copied()
        .collect();
    let point = exponent.saturating_add(int_part.len() as i64 - leading as i64);
    if negative {
        out.push('-');
    }
    write_es_layout(&digits, point, out);
}

/// An exponent's value, saturating: exponents beyond i64 are not a double anyway, and
/// saturation keeps them far out of every layout threshold.
fn parse_exponent(s: &[u8]) -> i64 {
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = digits.iter().fold(0i64, |acc, &d| {
        acc.saturating_mul(10).saturating_add((d - b'0') as i64)
    });
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// ECMAScript `Number::toString` (ES2015 7.1.12.1) for the value 0.DIGITS x 10^point,
/// applied to any number of digits.
fn write_es_layout(digits: &[u8], point: i64, out: &mut String) {
    let k = digits.len() as i64;
    let n = point;
    let push_digits = |out: &mut String, d: &[u8]| out.extend(d.iter().map(|&b| b as char));
    if k <= n && n <= 21 {
        push_digits(out, digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        push_digits(out, &digits[..n as usize]);
        out.push('.');
        push_digits(out, &digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        push_digits(out, digits);
    } else {
        push_digits(out, &digits[..1]);
        if k > 1 {
            out.push('.');
            push_digits(out, &digits[1..]);
        }
        let e = n as i128 - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.unsigned_abs().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::canonical_number as c;

    #[test]
    fn layouts() {
        assert_eq!(c("0"), "0");
        assert_eq!(c("-0.000"), "0");
        assert_eq!(c("1.0"), "1");
        assert_eq!(c("1e0"), "1");
        assert_eq!(c("100"), "100");
        assert_eq!(c("0.1"), "0.1");
        assert_eq!(c("12.50"), "12.5");
        assert_eq!(c("1e21"), "1e+21");
        assert_eq!(c("123456789012345678901"), "123456789012345678901");
        assert_eq!(c("0.000001"), "0.000001");
        assert_eq!(c("0.0000001"), "1e-7");
        assert_eq!(c("-1.5E-7"), "-1.5e-7");
        assert_eq!(c("1e400"), "1e+400");
        assert_eq!(c("9007199254740993"), "9007199254740993");
        assert_eq!(c("333333333.33333329"), "333333333.33333329");
        assert_eq!(c("0e99999999999999999999999"), "0");
        assert_eq!(c("1e-99999999999999999999999"), format!("1e-{}", i64::MAX));
    }
}
