//! Generated JSON documents for property tests, shared by the canon crate's tests and the
//! behaviour suite (which sends them through SQL).
#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::Value;

/// A number by its exact value: 0.DIGITS x 10^point (DIGITS without leading or trailing
/// zeros; empty is zero).
#[derive(Debug, Clone, PartialEq)]
pub struct Num {
    pub negative: bool,
    pub digits: String,
    pub point: i64,
}

#[derive(Debug, Clone)]
pub enum Doc {
    Null,
    Bool(bool),
    Num(Num),
    Str(String),
    Arr(Vec<Doc>),
    /// Members in the order written; `dup` members are written first with a junk value
    /// and then overridden (last one wins).
    Obj(Vec<(String, Doc)>),
}

pub fn num() -> impl Strategy<Value = Num> {
    (any::<bool>(), "[1-9]([0-9]{0,40}[1-9])?", -450i64..450).prop_map(
        |(negative, digits, point)| Num {
            negative,
            digits,
            point,
        },
    )
}

pub fn key() -> impl Strategy<Value = String> {
    // Characters whose UTF-16 order differs from their code point order, escapes and
    // plain ASCII.
    prop::collection::vec(
        prop_oneof![
            "[a-c]",
            Just("\u{e000}".to_string()),
            Just("\u{ffff}".to_string()),
            Just("\u{10000}".to_string()),
            Just("\u{1f600}".to_string()),
            Just("é".to_string()),
            Just("\"".to_string()),
            Just("\u{7}".to_string()),
        ],
        0..4,
    )
    .prop_map(|parts| parts.concat())
}

pub fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        num().prop_map(Doc::Num),
        key().prop_map(Doc::Str),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Arr),
            prop::collection::vec((key(), inner), 0..6).prop_map(Doc::Obj),
        ]
    })
}

/// Writes `doc` as JSON text; `style` varies whitespace, number spelling and string escapes.
pub fn render(doc: &Doc, style: u32, out: &mut String) {
    let ws = if style % 2 == 1 { " \n\t" } else { "" };
    match doc {
        Doc::Null => out.push_str("null"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Num(n) => out.push_str(&spell(n, style)),
        Doc::Str(s) => render_string(s, style, out),
        Doc::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                render(item, style.rotate_left(3) ^ i as u32, out);
            }
            out.push_str(ws);
            out.push(']');
        }
        Doc::Obj(members) => {
            out.push('{');
            let mut first = true;
            // Write a decoy for each key first when asked; the real member comes later.
            let decoys: Vec<&(String, Doc)> = if style.is_multiple_of(3) {
                members.iter().collect()
            } else {
                vec![]
            };
            for (k, _) in decoys.iter().map(|m| (&m.0, &m.1)) {
                if !first {
                    out.push(',');
                }
                first = false;
                render_string(k, style, out);
                out.push_str(":\"decoy\"");
            }
            let mut order: Vec<usize> = (0..members.len()).collect();
            if style.is_multiple_of(5) {
                order.reverse();
            }
            // A reversed order changes which duplicate is last: only where keys are unique.
            let unique = {
                let mut ks: Vec<&String> = members.iter().map(|m| &m.0).collect();
                ks.sort();
                ks.windows(2).all(|w| w[0] != w[1])
            };
            if !unique {
                order.sort();
            }
            for i in order {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(ws);
                render_string(&members[i].0, style, out);
                out.push_str(ws);
                out.push(':');
                render(&members[i].1, style.rotate_left(5) ^ i as u32, out);
            }
            out.push('}');
        }
    }
}

fn render_string(s: &str, style: u32, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || style.is_multiple_of(7) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04X}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub fn spell(n: &Num, style: u32) -> String {
    let sign = if n.negative { "-" } else { "" };
    let k = n.digits.len() as i64;
    let d = &n.digits;
    match style % 4 {
        0 => format!("{sign}0.{d}e{}", n.point),
        1 => format!("{sign}{d}E{:+}", n.point - k),
        2 => format!("{sign}{d}000e{}", n.point - k - 3),
        _ => format!("{sign}{}.{}0e{}", &d[..1], &d[1..], n.point - 1),
    }
}

pub fn text(doc: &Doc, style: u32) -> String {
    let mut s = String::new();
    render(doc, style, &mut s);
    s
}

pub fn to_value(doc: &Doc) -> Value {
    match doc {
        Doc::Null => Value::Null,
        Doc::Bool(b) => Value::Bool(*b),
        Doc::Num(n) => serde_json::from_str(&spell(n, 1)).unwrap(),
        Doc::Str(s) => Value::String(s.clone()),
        Doc::Arr(items) => Value::Array(items.iter().map(to_value).collect()),
        Doc::Obj(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), to_value(v)))
                .collect(),
        ),
    }
}

pub fn within_doubles(doc: &Doc) -> Doc {
    match doc {
        Doc::Num(n) => Doc::Num(Num {
            point: n.point.clamp(-300, 300),
            ..n.clone()
        }),
        Doc::Arr(items) => Doc::Arr(items.iter().map(within_doubles).collect()),
        Doc::Obj(members) => Doc::Obj(
            members
                .iter()
                .map(|(k, v)| (k.clone(), within_doubles(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The document with each number replaced by the exact value a Value holds for it.
pub fn from_doubles(doc: &Doc) -> Doc {
    match doc {
        Doc::Num(n) => {
            let held = serde_json::from_str::<Value>(&spell(n, 1))
                .unwrap()
                .to_string();
            Doc::Num(parse_num(&held))
        }
        Doc::Arr(items) => Doc::Arr(items.iter().map(from_doubles).collect()),
        Doc::Obj(members) => Doc::Obj(
            members
                .iter()
                .map(|(k, v)| (k.clone(), from_doubles(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn parse_num(s: &str) -> Num {
    let (negative, digits, point) = decompose(s);
    if digits.is_empty() {
        // Zero (or a double that underflowed to it).
        return Num {
            negative: false,
            digits: "0".into(),
            point: 1,
        };
    }
    Num {
        negative,
        digits,
        point,
    }
}

/// (negative, significant digits, point) with value = 0.DIGITS x 10^point, read from a
/// JSON number; independent of the crate's own parser.
pub fn decompose(number: &str) -> (bool, String, i64) {
    let (negative, body) = number
        .strip_prefix('-')
        .map(|b| (true, b))
        .unwrap_or((false, number));
    let (mant, exp) = body
        .split_once(['e', 'E'])
        .map(|(m, e)| (m, e.parse::<i64>().expect("exponent")))
        .unwrap_or((body, 0));
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let all = format!("{int}{frac}");
    let lead = all.len() - all.trim_start_matches('0').len();
    let digits = all
        .trim_start_matches('0')
        .trim_end_matches('0')
        .to_string();
    (negative, digits, exp + int.len() as i64 - lead as i64)
}
