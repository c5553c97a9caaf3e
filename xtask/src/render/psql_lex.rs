//! The part of psql's lexer (src/fe_utils/psqlscan.l) that decides what psql changes in a
//! script before the server sees it: where a statement ends, where a backslash command
//! starts, and where a variable (`:name`, `:'name'`, `:"name"`, `:{?name}`) is substituted.
//! psql substitutes nothing inside quoted literals, quoted identifiers, dollar-quoted
//! bodies or comments, so those are kept as [`Piece::Verbatim`], byte for byte.
//!
//! Used by [`super::plain`] to turn the portable variant's psql scripts into plain SQL.

/// One piece of a script, in order. Concatenating the text of every piece gives the
/// script back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// SQL text outside quotes and comments (no statement end inside).
    Code(String),
    /// A quoted literal or identifier, a dollar-quoted body, or a comment.
    Verbatim(String),
    /// `;` at parenthesis depth 0: the statement ends.
    End,
    /// A psql variable reference outside quotes.
    Var(VarRef),
    /// A backslash command: its name (`if`, `set`, `ir`, `gset`...) and the rest of its
    /// line; `line` is 1-based. It takes the whole line, its newline included.
    Meta {
        name: String,
        args: String,
        line: usize,
    },
}

/// How a variable is written, and so how psql substitutes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarRef {
    /// `:name`: the value as it is.
    Raw(String),
    /// `:'name'`: the value as a quoted literal.
    Literal(String),
    /// `:"name"`: the value as a quoted identifier.
    Ident(String),
    /// `:{?name}`: `TRUE` or `FALSE`, whether the variable is set.
    Defined(String),
}

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || !c.is_ascii()
}

fn ident_cont(c: char) -> bool {
    ident_start(c) || c.is_ascii_digit() || c == '$'
}

fn variable_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii()
}

/// The script's pieces, or what psql would not accept (an unterminated quote or comment,
/// which psql would leave unsent at the end of the file).
pub fn lex(text: &str) -> Result<Vec<Piece>, String> {
    let s: Vec<char> = text.chars().collect();
    let mut out: Vec<Piece> = Vec::new();
    let mut code = String::new();
    let mut depth: i32 = 0;
    let mut i = 0;
    let line_of = |i: usize| s[..i].iter().filter(|c| **c == '\n').count() + 1;
    let flush = |code: &mut String, out: &mut Vec<Piece>| {
        if !code.is_empty() {
            out.push(Piece::Code(std::mem::take(code)));
        }
    };
    // Text up to (not including) `end`, from `from`.
    let take = |from: usize, to: usize| s[from..to].iter().collect::<String>();
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        let prev = if i > 0 { Some(s[i - 1]) } else { None };
        let token_start = prev.is_none_or(|p| !ident_cont(p));
        match c {
            '-' if next == Some('-') => {
                let end = s[i..]
                    .iter()
                    .position(|c| *c == '\n')
                    .map_or(s.len(), |p| i + p);
                flush(&mut code, &mut out);
                out.push(Piece::Verbatim(take(i, end)));
                i = end;
            }
            '/' if next == Some('*') => {
                // Comments nest in PostgreSQL.
                let (mut j, mut nest) = (i + 2, 1);
                while nest > 0 {
                    match (s.get(j), s.get(j + 1)) {
                        (Some('/'), Some('*')) => (nest, j) = (nest + 1, j + 2),
                        (Some('*'), Some('/')) => (nest, j) = (nest - 1, j + 2),
                        (Some(_), _) => j += 1,
                        (None, _) => {
                            return Err(format!("line {}: unterminated /* comment", line_of(i)))
                        }
                    }
                }
                flush(&mut code, &mut out);
                out.push(Piece::Verbatim(take(i, j)));
                i = j;
            }
            '\'' | '"' => {
                // A backslash escapes only in E'...' (standard_conforming_strings is on).
                let escapes = c == '\''
                    && matches!(prev, Some('e' | 'E'))
                    && (i < 2 || !ident_cont(s[i - 2]));
                let mut j = i + 1;
                loop {
                    match s.get(j) {
                        None => {
                            return Err(format!("line {}: unterminated quoted text", line_of(i)))
                        }
                        Some('\\') if escapes => j += 2,
                        Some(q) if *q == c && s.get(j + 1) == Some(&c) => j += 2,
                        Some(q) if *q == c => break,
                        Some(_) => j += 1,
                    }
                }
                flush(&mut code, &mut out);
                out.push(Piece::Verbatim(take(i, j + 1)));
                i = j + 1;
            }
            '$' if token_start => {
                // $tag$ ... $tag$ (the tag may be empty); `$1` is a parameter.
                let mut j = i + 1;
                if s.get(j).is_some_and(|c| ident_start(*c)) {
                    j += 1;
                    while s.get(j).is_some_and(|c| ident_cont(*c) && *c != '$') {
                        j += 1;
                    }
                }
                if s.get(j) == Some(&'$') {
                    let tag = take(i, j + 1);
                    let body = take(j + 1, s.len());
                    let Some(close) = body.find(&tag) else {
                        return Err(format!("line {}: unterminated {tag} body", line_of(i)));
                    };
                    let end = j + 1 + body[..close].chars().count() + tag.chars().count();
                    flush(&mut code, &mut out);
                    out.push(Piece::Verbatim(take(i, end)));
                    i = end;
                } else {
                    code.push(c);
                    i += 1;
                }
            }
            ':' if next == Some(':') => {
                code.push_str("::");
                i += 2;
            }
            ':' if matches!(next, Some('\'' | '"')) => {
                let q = next.unwrap_or('"');
                let mut j = i + 2;
                while s.get(j).is_some_and(|c| variable_char(*c)) {
                    j += 1;
                }
                if j > i + 2 && s.get(j) == Some(&q) {
                    let name = take(i + 2, j);
                    flush(&mut code, &mut out);
                    out.push(Piece::Var(if q == '\'' {
                        VarRef::Literal(name)
                    } else {
                        VarRef::Ident(name)
                    }));
                    i = j + 1;
                } else {
                    code.push(c);
                    i += 1;
                }
            }
            ':' if next == Some('{') && s.get(i + 2) == Some(&'?') => {
                let mut j = i + 3;
                while s.get(j).is_some_and(|c| variable_char(*c)) {
                    j += 1;
                }
                if s.get(j) != Some(&'}') {
                    return Err(format!("line {}: unterminated :{{?", line_of(i)));
                }
                flush(&mut code, &mut out);
                out.push(Piece::Var(VarRef::Defined(take(i + 3, j))));
                i = j + 1;
            }
            ':' if next.is_some_and(variable_char) => {
                let mut j = i + 1;
                while s.get(j).is_some_and(|c| variable_char(*c)) {
                    j += 1;
                }
                flush(&mut code, &mut out);
                out.push(Piece::Var(VarRef::Raw(take(i + 1, j))));
                i = j;
            }
            '\\' => {
                // A backslash command runs to the end of its line (psql's `\\` separator
                // and commands sharing a line are not used by the scripts: refused).
                let end = s[i..]
                    .iter()
                    .position(|c| *c == '\n')
                    .map_or(s.len(), |p| i + p);
                let line = take(i + 1, end);
                let (name, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
                if name.is_empty() || args.contains('\\') {
                    return Err(format!(
                        "line {}: backslash command {line:?}: only one command per line is understood",
                        line_of(i)
                    ));
                }
                flush(&mut code, &mut out);
                out.push(Piece::Meta {
                    name: name.to_string(),
                    args: args.trim().to_string(),
                    line: line_of(i),
                });
                i = if end < s.len() { end + 1 } else { end };
            }
            '(' => {
                depth += 1;
                code.push(c);
                i += 1;
            }
            ')' => {
                depth -= 1;
                code.push(c);
                i += 1;
            }
            ';' if depth <= 0 => {
                flush(&mut code, &mut out);
                out.push(Piece::End);
                depth = 0;
                i += 1;
            }
            _ => {
                code.push(c);
                i += 1;
            }
        }
    }
    flush(&mut code, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Piece::*;

    fn code(s: &str) -> Piece {
        Code(s.into())
    }
    fn verb(s: &str) -> Piece {
        Verbatim(s.into())
    }

    #[test]
    fn nothing_inside_quotes_bodies_or_comments_is_a_variable() {
        let text =
            "SELECT ':\"a\"', \":b\", $x$ :\"c\" ; $x$ -- :\"d\";\n/* :e; /* ; */ */ :\"f\";";
        assert_eq!(
            lex(text).unwrap(),
            vec![
                code("SELECT "),
                verb("':\"a\"'"),
                code(", "),
                verb("\":b\""),
                code(", "),
                verb("$x$ :\"c\" ; $x$"),
                code(" "),
                verb("-- :\"d\";"),
                code("\n"),
                verb("/* :e; /* ; */ */"),
                code(" "),
                Var(VarRef::Ident("f".into())),
                End,
            ]
        );
    }

    #[test]
    fn the_pieces_give_the_text_back() {
        let text = "SELECT E'it\\'s ; ', 'a''b', x::int, a$b, $1, arr[1:2] FROM t;\n";
        let back: String = lex(text)
            .unwrap()
            .iter()
            .map(|p| match p {
                Code(t) | Verbatim(t) => t.clone(),
                End => ";".into(),
                Var(VarRef::Raw(n)) => format!(":{n}"),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, text);
    }

    #[test]
    fn a_semicolon_in_parentheses_or_an_e_string_does_not_end_the_statement() {
        let pieces = lex("SELECT (1;2), E'\\';', date'x;';").unwrap();
        assert_eq!(pieces.iter().filter(|p| **p == End).count(), 1);
    }

    #[test]
    fn backslash_commands_take_their_line() {
        assert_eq!(
            lex("SELECT 1 AS x \\gset\n\\if :{?schema}\n").unwrap(),
            vec![
                code("SELECT 1 AS x "),
                Meta {
                    name: "gset".into(),
                    args: "".into(),
                    line: 1
                },
                Meta {
                    name: "if".into(),
                    args: ":{?schema}".into(),
                    line: 2
                },
            ]
        );
    }

    #[test]
    fn an_unterminated_body_is_refused() {
        assert!(lex("DO $a$ BEGIN END $b$;")
            .unwrap_err()
            .contains("unterminated $a$"));
        assert!(lex("SELECT 'x").is_err());
    }
}
