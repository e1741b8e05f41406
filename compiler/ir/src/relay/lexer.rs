//! Tokens of Relay text, each with its `line:column`.

use crate::error::{Error, Result};
use crate::span::Span;

/// A token of Relay text.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `%name` or `%0`.
    Local(String),
    /// `@name`.
    Global(String),
    /// An identifier, possibly dotted (`nn.conv2d`, `float32`, `Tensor`).
    Ident(String),
    /// An integer literal with its suffix (`1`, `1i64`, `2u8`).
    Int(i64, String),
    /// A float literal with its suffix (`1.5f`, `1e-05f`, `0.5`, `1f16`).
    Float(f64, String),
    /// A string literal, escapes resolved.
    Str(String),
    /// Punctuation: `( ) [ ] { } , ; : = . -> #` and the infix operators.
    Punct(&'static str),
    /// The end of the input (always the last token).
    Eof,
}

impl Tok {
    /// The token as error messages name it (`` `%x` ``, `string "a"`, `the end of the input`).
    pub fn describe(&self) -> String {
        match self {
            Tok::Local(n) => format!("`%{n}`"),
            Tok::Global(n) => format!("`@{n}`"),
            Tok::Ident(n) => format!("`{n}`"),
            Tok::Int(v, s) => format!("`{v}{s}`"),
            Tok::Float(v, s) => format!("`{v}{s}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "the end of the input".into(),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// 1-based line of its first character.
    pub line: u32,
    /// 1-based column of its first character, in characters.
    pub column: u32,
}

impl Token {
    /// The token's position as a [`Span::Text`].
    pub fn span(&self) -> Span {
        Span::text(self.line, self.column)
    }
}

/// Two-character punctuation first: the lexer takes the first that matches.
const PUNCT: [&str; 23] = [
    "->", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ";", ":", "=", ".", "#", "-", "+", "*", "/", "<",
    ">",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Split `src` into tokens. Comments (`// …` and `/* … */`, which nest) are skipped.
pub fn lex(src: &str) -> Result<Vec<Token>> {
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    let mut out = Vec::new();
    let advance = |i: &mut usize, line: &mut u32, col: &mut u32, n: usize| {
        for _ in 0..n {
            if chars.get(*i) == Some(&'\n') {
                *line += 1;
                *col = 1;
            } else {
                *col += 1;
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        let err = |m: String| Error::parse(Span::text(tl, tc), m);
        if c.is_whitespace() {
            advance(&mut i, &mut line, &mut col, 1);
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                advance(&mut i, &mut line, &mut col, 1);
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            advance(&mut i, &mut line, &mut col, 2);
            // Block comments nest, as in TVM's parser.
            let mut depth = 1;
            loop {
                if i >= chars.len() {
                    return Err(err("unterminated comment `/* …`".into()));
                }
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    advance(&mut i, &mut line, &mut col, 2);
                    depth += 1;
                    continue;
                }
                if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    advance(&mut i, &mut line, &mut col, 2);
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    continue;
                }
                advance(&mut i, &mut line, &mut col, 1);
            }
            continue;
        }
        let tok = if c == '%' || c == '@' {
            let start = i + 1;
            let mut j = start;
            while j < chars.len() && (is_ident_char(chars[j]) || chars[j] == '.') {
                j += 1;
            }
            // A trailing `.` followed by a digit is a tuple projection, not part of the name.
            while j > start && chars[j - 1] == '.' {
                j -= 1;
            }
            if let Some(dot) = chars[start..j].iter().position(|&ch| ch == '.') {
                if chars.get(start + dot + 1).is_some_and(|d| d.is_ascii_digit()) {
                    j = start + dot;
                }
            }
            if j == start {
                return Err(err(format!("expected a name after `{c}`")));
            }
            let name: String = chars[start..j].iter().collect();
            let n = j - i;
            advance(&mut i, &mut line, &mut col, n);
            if c == '%' {
                Tok::Local(name)
            } else {
                Tok::Global(name)
            }
        } else if is_ident_start(c) {
            let mut j = i;
            while j < chars.len()
                && (is_ident_char(chars[j])
                    || (chars[j] == '.' && chars.get(j + 1).is_some_and(|&d| is_ident_start(d))))
            {
                j += 1;
            }
            let name: String = chars[i..j].iter().collect();
            let n = j - i;
            advance(&mut i, &mut line, &mut col, n);
            // `inff` is a float32 literal, as in TVM's tokenizer: the printer
            // writes an infinite float attribute (`clip`'s `a_min=-inff`) so,
            // and a NaN one as `nanf`; both must read back.
            match name.as_str() {
                "inff" => Tok::Float(f64::INFINITY, "f".into()),
                "nanf" => Tok::Float(f64::NAN, "f".into()),
                _ => Tok::Ident(name),
            }
        } else if c.is_ascii_digit() {
            let mut j = i;
            while j < chars.len() && chars[j].is_ascii_digit() {
                j += 1;
            }
            let mut is_float = false;
            if chars.get(j) == Some(&'.') && chars.get(j + 1).is_some_and(|d| d.is_ascii_digit()) {
                is_float = true;
                j += 1;
                while j < chars.len() && chars[j].is_ascii_digit() {
                    j += 1;
                }
            }
            if matches!(chars.get(j), Some('e') | Some('E'))
                && (chars.get(j + 1).is_some_and(|d| d.is_ascii_digit())
                    || (matches!(chars.get(j + 1), Some('-') | Some('+'))
                        && chars.get(j + 2).is_some_and(|d| d.is_ascii_digit())))
            {
                is_float = true;
                j += 2;
                while j < chars.len() && chars[j].is_ascii_digit() {
                    j += 1;
                }
            }
            let number: String = chars[i..j].iter().collect();
            let mut k = j;
            while k < chars.len() && is_ident_char(chars[k]) {
                k += 1;
            }
            let suffix: String = chars[j..k].iter().collect();
            let n = k - i;
            let tok = if is_float || suffix.starts_with('f') {
                let v: f64 = number.parse().map_err(|_| err(format!("malformed number `{number}`")))?;
                if !matches!(suffix.as_str(), "" | "f" | "f32" | "f16" | "f64") {
                    return Err(err(format!("unknown float suffix `{suffix}`")));
                }
                Tok::Float(v, suffix)
            } else {
                let v: i64 = number.parse().map_err(|_| err(format!("integer `{number}` is too large")))?;
                if !matches!(suffix.as_str(), "" | "i" | "i64" | "i32" | "i16" | "i8" | "u8" | "u16" | "u32" | "u64") {
                    return Err(err(format!("unknown integer suffix `{suffix}`")));
                }
                Tok::Int(v, suffix)
            };
            advance(&mut i, &mut line, &mut col, n);
            tok
        } else if c == '"' {
            let mut j = i + 1;
            let mut s = String::new();
            loop {
                match chars.get(j) {
                    None | Some('\n') => return Err(err("unterminated string".into())),
                    Some('"') => break,
                    Some('\\') => {
                        match chars.get(j + 1) {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(&e @ ('"' | '\\')) => s.push(e),
                            _ => return Err(err("unknown escape in string".into())),
                        }
                        j += 2;
                    }
                    Some(&ch) => {
                        s.push(ch);
                        j += 1;
                    }
                }
            }
            let n = j + 1 - i;
            advance(&mut i, &mut line, &mut col, n);
            Tok::Str(s)
        } else {
            let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
                return Err(err(format!("unexpected character `{c}`")));
            };
            advance(&mut i, &mut line, &mut col, p.chars().count());
            Tok::Punct(p)
        };
        out.push(Token { tok, line: tl, column: tc });
    }
    out.push(Token { tok: Tok::Eof, line, column: col });
    Ok(out)
}
