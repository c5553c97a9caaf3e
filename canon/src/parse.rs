//! The text path: parses JSON text and writes its canonical form in one pass (objects are
//! buffered to sort their members).

use std::borrow::Cow;

use crate::number::write_number;
use crate::write::{write_object, write_string};
use crate::{CanonError, MAX_DEPTH};

pub(crate) fn canonicalize(text: &str) -> Result<String, CanonError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    let mut out = String::with_capacity(text.len());
    p.skip_ws();
    p.value(&mut out, 0)?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(p.syntax("end of input"));
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn syntax(&self, expected: &'static str) -> CanonError {
        CanonError::Syntax {
            offset: self.pos,
            expected,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8, expected: &'static str) -> Result<(), CanonError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(expected))
        }
    }

    fn value(&mut self, out: &mut String, depth: usize) -> Result<(), CanonError> {
        match self.peek() {
            Some(b'{') => self.object(out, depth + 1),
            Some(b'[') => self.array(out, depth + 1),
            Some(b'"') => {
                let s = self.string()?;
                write_string(&s, out);
                Ok(())
            }
            Some(b't') => self.literal("true", out),
            Some(b'f') => self.literal("false", out),
            Some(b'n') => self.literal("null", out),
            Some(b'-' | b'0'..=b'9') => self.number(out),
            _ => Err(self.syntax("a value")),
        }
    }

    fn literal(&mut self, word: &'static str, out: &mut String) -> Result<(), CanonError> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            out.push_str(word);
            Ok(())
        } else {
            Err(self.syntax(word))
        }
    }

    fn array(&mut self, out: &mut String, depth: usize) -> Result<(), CanonError> {
        if depth > MAX_DEPTH {
            return Err(CanonError::TooDeep);
        }
        self.pos += 1;
        out.push('[');
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            out.push(']');
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.value(out, depth)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    out.push(',');
                }
                Some(b']') => {
                    self.pos += 1;
                    out.push(']');
                    return Ok(());
                }
                _ => return Err(self.syntax("',' or ']'")),
            }
        }
    }

    fn object(&mut self, out: &mut String, depth: usize) -> Result<(), CanonError> {
        if depth > MAX_DEPTH {
            return Err(CanonError::TooDeep);
        }
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            out.push_str("{}");
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a member name"));
            }
            let key = self.string()?;
            self.skip_ws();
            self.eat(b':', "':'")?;
            self.skip_ws();
            let mut value = String::new();
            self.value(&mut value, depth)?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    write_object(members, out);
                    return Ok(());
                }
                _ => return Err(self.syntax("',' or '}'")),
            }
        }
    }

    fn number(&mut self, out: &mut String) -> Result<(), CanonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.syntax("a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("a digit after '.'"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("a digit in the exponent"));
            }
            self.digits();
        }
        write_number(&self.text[start..self.pos], out);
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn hex4(&mut self) -> Result<u32, CanonError> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.syntax("four hex digits"))?;
        let mut v = 0u32;
        for &b in h {
            let d = (b as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("four hex digits"))?;
            v = v * 16 + d;
        }
        self.pos += 4;
        Ok(v)
    }

    /// A string token, unescaped: borrowed from the input unless it has escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, CanonError> {
        self.pos += 1;
        let first = self.pos;
        while let Some(b) = self.peek() {
            match b {
                b'"' => {
                    self.pos += 1;
                    return Ok(Cow::Borrowed(&self.text[first..self.pos - 1]));
                }
                b'\\' | 0x00..=0x1f => break,
                _ => self.pos += 1,
            }
        }
        let mut s = String::new();
        let mut start = first;
        loop {
            match self.peek() {
                None => return Err(self.syntax("'\"'")),
                Some(b'"') => {
                    s.push_str(&self.text[start..self.pos]);
                    self.pos += 1;
                    return Ok(Cow::Owned(s));
                }
                Some(0x00..=0x1f) => return Err(self.syntax("an escaped control character")),
                Some(b'\\') => {
                    s.push_str(&self.text[start..self.pos]);
                    let at = self.pos;
                    self.pos += 1;
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let unit = self.hex4()?;
                            self.pos -= 1;
                            self.unicode_escape(unit, at)?
                        }
                        _ => return Err(self.syntax("an escape")),
                    };
                    if c == '\0' {
                        return Err(CanonError::Nul);
                    }
                    s.push(c);
                    self.pos += 1;
                    start = self.pos;
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// The character of a `\uXXXX` escape (and of the low surrogate that must follow a
    /// high one). Leaves `pos` on the last hex digit.
    fn unicode_escape(&mut self, unit: u32, at: usize) -> Result<char, CanonError> {
        match unit {
            0xD800..=0xDBFF => {
                if self.s.get(self.pos + 1..self.pos + 3) != Some(b"\\u") {
                    return Err(CanonError::LoneSurrogate { offset: at });
                }
                self.pos += 3;
                let low = self.hex4()?;
                self.pos -= 1;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(CanonError::LoneSurrogate { offset: at });
                }
                let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                char::from_u32(c).ok_or(CanonError::LoneSurrogate { offset: at })
            }
            0xDC00..=0xDFFF => Err(CanonError::LoneSurrogate { offset: at }),
            _ => char::from_u32(unit).ok_or(CanonError::LoneSurrogate { offset: at }),
        }
    }
}
