//! The TIR text's tokens: Python's line rules (`INDENT`/`DEDENT` tokens,
//! newlines inside brackets join lines, `#` comments).

use crate::error::{Error, Result};
use crate::span::Span;

pub(super) const PUNCT: [&str; 23] = [
    "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ":", "=", ".", "@", "+", "-", "*", "/", "%", "<",
    ">",
];

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Int(u64),
    Float(f64),
    Str(String),
    Punct(&'static str),
    Newline,
    Indent,
    Dedent,
    Eof,
}

impl Tok {
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Ident(n) => format!("`{n}`"),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Float(v) => format!("`{v:?}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Newline => "the end of the line".into(),
            Tok::Indent => "an indented line".into(),
            Tok::Dedent => "the end of the block".into(),
            Tok::Eof => "the end of the input".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) span: Span,
}

/// `src` as tokens, with `Newline` ending each logical line and
/// `Indent`/`Dedent` around each block.
pub(super) fn lex(src: &str) -> Result<Vec<Token>> {
    let (mut out, mut indents, mut brackets, mut end) = (Vec::new(), vec![0usize], 0usize, Span::text(1, 1));
    for (line, raw) in (1u32..).zip(src.split('\n')) {
        let chars: Vec<char> = raw.strip_suffix('\r').unwrap_or(raw).chars().collect();
        let at = |i: usize| Span::text(line, i as u32 + 1);
        let mut i = 0;
        if brackets == 0 {
            i = chars.iter().take_while(|&&c| c == ' ' || c == '\t').count();
            if chars.get(i).is_none_or(|&c| c == '#') {
                continue;
            }
            if let Some(t) = chars[..i].iter().position(|&c| c == '\t') {
                return Err(Error::parse(at(t), "a tab in the indentation; indent with spaces"));
            }
            if i > indents.last().copied().unwrap_or(0) {
                indents.push(i);
                out.push(Token { tok: Tok::Indent, span: at(i) });
            }
            while indents.last().is_some_and(|&w| i < w) {
                indents.pop();
                out.push(Token { tok: Tok::Dedent, span: at(i) });
            }
            if let Some(&outer) = indents.last().filter(|&&w| w != i) {
                let m = format!("an indentation of {i} spaces matches no enclosing block (the nearest is {outer})");
                return Err(Error::parse(at(i), m));
            }
        }
        // Where an identifier ends, and where a name's component may start
        // (right after `name.`: `input.1` is a name, not `input` and `.1`).
        let (mut pending, mut ident_end, mut component_at) = (false, None, None);
        while i < chars.len() {
            let (c, start) = (chars[i], i);
            let err = |m: String| Error::parse(at(start), m);
            let run = |i: &mut usize, f: fn(char) -> bool| {
                while chars.get(*i).is_some_and(|&c| f(c)) {
                    *i += 1;
                }
            };
            let tok = match c {
                ' ' | '\t' => {
                    i += 1;
                    continue;
                }
                '#' => break,
                c if c.is_ascii_alphabetic() || c == '_' || component_at == Some(i) && c.is_ascii_digit() => {
                    run(&mut i, |c| c.is_ascii_alphanumeric() || c == '_');
                    Tok::Ident(chars[start..i].iter().collect())
                }
                c if c.is_ascii_digit() => {
                    run(&mut i, |c| c.is_ascii_digit());
                    let mut float = chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit);
                    if float {
                        i += 1;
                        run(&mut i, |c| c.is_ascii_digit());
                    }
                    let sign = usize::from(matches!(chars.get(i + 1), Some('+' | '-')));
                    if matches!(chars.get(i), Some('e' | 'E'))
                        && chars.get(i + 1 + sign).is_some_and(char::is_ascii_digit)
                    {
                        float = true;
                        i += 1 + sign;
                        run(&mut i, |c| c.is_ascii_digit());
                    }
                    let text: String = chars[start..i].iter().collect();
                    if let Some(d) = chars.get(i).filter(|d| d.is_ascii_alphanumeric() || **d == '_' || **d == '.') {
                        return Err(err(format!("malformed number `{text}{d}`")));
                    }
                    if float {
                        Tok::Float(text.parse().map_err(|_| err(format!("malformed number `{text}`")))?)
                    } else {
                        Tok::Int(text.parse().map_err(|_| err(format!("integer `{text}` is too large")))?)
                    }
                }
                '"' => {
                    let mut s = String::new();
                    i += 1;
                    loop {
                        let Some(&ch) = chars.get(i) else { return Err(err("unterminated string".into())) };
                        i += 1;
                        let escaped = match ch {
                            '"' => break,
                            '\\' => chars.get(i).copied(),
                            ch => {
                                s.push(ch);
                                continue;
                            }
                        };
                        i += 1;
                        s.push(match escaped {
                            Some('n') => '\n',
                            Some('t') => '\t',
                            Some('r') => '\r',
                            Some('0') => '\0',
                            Some(q @ ('"' | '\\' | '\'')) => q,
                            // `\u{7f}`, as Rust's `{:?}` writes it.
                            Some('u') if chars.get(i) == Some(&'{') => {
                                let close = chars[i..].iter().position(|&d| d == '}').map(|p| i + p);
                                let hex: String = close.map(|e| chars[i + 1..e].iter().collect()).unwrap_or_default();
                                match (close, u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32)) {
                                    (Some(e), Some(ch)) => {
                                        i = e + 1;
                                        ch
                                    }
                                    _ => return Err(err("malformed `\\u{…}` escape in string".into())),
                                }
                            }
                            _ => return Err(err("unknown escape in string".into())),
                        });
                    }
                    Tok::Str(s)
                }
                c => {
                    let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                    let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
                        return Err(err(format!("unexpected character `{c}`")));
                    };
                    i += p.len();
                    match *p {
                        "(" | "[" | "{" => brackets += 1,
                        ")" | "]" | "}" => brackets = brackets.saturating_sub(1),
                        _ => {}
                    }
                    Tok::Punct(p)
                }
            };
            pending = true;
            component_at = (tok == Tok::Punct(".") && ident_end == Some(start)).then_some(i);
            ident_end = matches!(tok, Tok::Ident(_)).then_some(i);
            out.push(Token { tok, span: at(start) });
        }
        if pending {
            end = at(chars.len());
            if brackets == 0 {
                out.push(Token { tok: Tok::Newline, span: end.clone() });
            }
        }
    }
    out.extend((1..indents.len()).map(|_| Token { tok: Tok::Dedent, span: end.clone() }));
    out.push(Token { tok: Tok::Eof, span: end });
    Ok(out)
}
