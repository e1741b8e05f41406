//! The error type of the IR crate: every variant says what went wrong and where.

use crate::span::Span;

/// An error from parsing, type inference, evaluation or IR construction.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Malformed Relay text.
    #[error("{span}: parse error: {message}")]
    Parse {
        /// Where the error is.
        span: Span,
        /// What went wrong, without the location.
        message: String,
    },
    /// Ill-typed IR (shape or dtype mismatch, wrong arity, bad attribute).
    #[error("{span}: type error: {message}")]
    Type {
        /// Where the error is.
        span: Span,
        /// What went wrong, without the location.
        message: String,
    },
    /// The reference interpreter could not evaluate an expression.
    #[error("{span}: evaluation error: {message}")]
    Eval {
        /// Where the error is.
        span: Span,
        /// What went wrong, without the location.
        message: String,
    },
    /// IR built or used incorrectly (an unknown operator, a missing function, …).
    #[error("{span}: {message}")]
    Invalid {
        /// Where the error is.
        span: Span,
        /// What went wrong, without the location.
        message: String,
    },
}

impl Error {
    /// A [`Error::Parse`] at `span`.
    pub fn parse(span: Span, message: impl Into<String>) -> Self {
        Error::Parse { span, message: message.into() }
    }
    /// A [`Error::Type`] at `span`.
    pub fn ty(span: Span, message: impl Into<String>) -> Self {
        Error::Type { span, message: message.into() }
    }
    /// A [`Error::Eval`] at `span`.
    pub fn eval(span: Span, message: impl Into<String>) -> Self {
        Error::Eval { span, message: message.into() }
    }
    /// A [`Error::Invalid`] at `span`.
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

/// The IR crate's result, with [`Error`] unless another error type is named.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an operator's type relation, reference evaluator or attribute
/// accessor found wrong. It carries no location: the caller (the type
/// checker, the interpreter, a lowering) adds the operator and the span.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    message: String,
}

impl OpError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        OpError { message: message.into() }
    }

    /// What went wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for OpError {
    fn from(message: String) -> Self {
        OpError { message }
    }
}

impl From<&str> for OpError {
    fn from(message: &str) -> Self {
        OpError { message: message.to_string() }
    }
}

/// Callers that still report in text (and `?` across the crate boundary)
/// take the message.
impl From<OpError> for String {
    fn from(e: OpError) -> Self {
        e.message
    }
}
