//! The error type of the IR crate: every variant says what went wrong and where.

use crate::span::Span;

/// An error from parsing, type inference, evaluation or IR construction.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Malformed Relay text.
    #[error("{span}: parse error: {message}")]
    Parse { span: Span, message: String },
    /// Ill-typed IR (shape or dtype mismatch, wrong arity, bad attribute).
    #[error("{span}: type error: {message}")]
    Type { span: Span, message: String },
    /// The reference interpreter could not evaluate an expression.
    #[error("{span}: evaluation error: {message}")]
    Eval { span: Span, message: String },
    /// IR built or used incorrectly (an unknown operator, a missing function, …).
    #[error("{span}: {message}")]
    Invalid { span: Span, message: String },
}

impl Error {
    pub fn parse(span: Span, message: impl Into<String>) -> Self {
        Error::Parse { span, message: message.into() }
    }
    pub fn ty(span: Span, message: impl Into<String>) -> Self {
        Error::Type { span, message: message.into() }
    }
    pub fn eval(span: Span, message: impl Into<String>) -> Self {
        Error::Eval { span, message: message.into() }
    }
    pub fn invalid(span: Span, message: impl Into<String>) -> Self {
        Error::Invalid { span, message: message.into() }
    }

    /// Where the error is.
    pub fn span(&self) -> &Span {
        match self {
            Error::Parse { span, .. }
            | Error::Type { span, .. }
            | Error::Eval { span, .. }
            | Error::Invalid { span, .. } => span,
        }
    }

    /// The message without the location.
    pub fn message(&self) -> &str {
        match self {
            Error::Parse { message, .. }
            | Error::Type { message, .. }
            | Error::Eval { message, .. }
            | Error::Invalid { message, .. } => message,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
