//! Shared by the canon tests: the RFC 8785 vectors, and spellings of one number.
#![allow(dead_code)]

use std::path::PathBuf;

use crate::gen::decompose;

/// The vectors live in canon/tests/data/jcs; this module is also compiled into the
/// behaviour suite, whose manifest is in tests/.
pub fn data(path: &str) -> String {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = ["tests/data/jcs", "../canon/tests/data/jcs"]
        .iter()
        .map(|d| manifest.join(d))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| manifest.join("tests/data/jcs"));
    let p = dir.join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub const VECTORS: [&str; 6] = [
    "arrays",
    "french",
    "structures",
    "unicode",
    "values",
    "weird",
];

/// The expected canonical output of a vector under the lossless rule.
pub fn expected_lossless(name: &str) -> String {
    if name == "values" {
        data("output-lossless/values.json")
    } else {
        data(&format!("output/{name}.json"))
    }
}

/// (bits as f64, ECMAScript output) for each line of the number file.
pub fn number_lines() -> Vec<(f64, String)> {
    data("numbers/es6-1000.txt")
        .lines()
        .map(|l| {
            let (bits, out) = l.split_once(',').expect("bits,output");
            (
                f64::from_bits(u64::from_str_radix(bits, 16).expect("hex bits")),
                out.to_string(),
            )
        })
        .collect()
}

/// Several spellings of the same exact value: exponent form with a leading `0.`, an
/// integer mantissa, trailing zeros, an upper-case `E` with an explicit `+`.
pub fn spellings(es: &str) -> Vec<String> {
    let (neg, digits, point) = decompose(es);
    if digits.is_empty() {
        return vec![
            "0".into(),
            "-0".into(),
            "0.000".into(),
            "-0.0e5".into(),
            "0E-3".into(),
        ];
    }
    let sign = if neg { "-" } else { "" };
    let k = digits.len() as i64;
    vec![
        es.to_string(),
        format!("{sign}0.{digits}e{point}"),
        format!("{sign}{digits}e{}", point - k),
        format!("{sign}{digits}000e{}", point - k - 3),
        format!("{sign}{}.{}0E{:+}", &digits[..1], &digits[1..], point - 1),
        format!("{sign}00.0{digits}e{}", point + 1).replacen("00.", "0.", 1),
    ]
}
