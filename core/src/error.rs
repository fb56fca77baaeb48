//! Status codes and the error type shared by every layer.
//!
//! The codes follow absl's canonical codes (so hosts can map them to their own), plus
//! `AbiMismatch` for plugin version refusals. The numeric values are part of the C ABI
//! (`DP_OK`, `DP_INVALID_ARGUMENT`, … in `devplug.h`) and never change.

use std::fmt;

/// A status code. `Ok` is never carried by an [`Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    /// A plugin and the host disagree on the ABI version.
    AbiMismatch = 100,
}

impl Code {
    /// Every code, in numeric order.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::AbiMismatch,
    ];

    /// The code with this numeric value, if any.
    pub fn from_i32(v: i32) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| *c as i32 == v)
    }

    /// The canonical upper-case name, e.g. `INVALID_ARGUMENT`.
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::AbiMismatch => "ABI_MISMATCH",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error: a code and a message meant for a person.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub code: Code,
    pub message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        debug_assert!(code != Code::Ok, "an Error never carries Code::Ok");
        Error {
            code,
            message: message.into(),
        }
    }
    pub fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Code::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Code::NotFound, message)
    }
    pub fn already_exists(message: impl Into<String>) -> Error {
        Error::new(Code::AlreadyExists, message)
    }
    pub fn failed_precondition(message: impl Into<String>) -> Error {
        Error::new(Code::FailedPrecondition, message)
    }
    pub fn resource_exhausted(message: impl Into<String>) -> Error {
        Error::new(Code::ResourceExhausted, message)
    }
    pub fn out_of_range(message: impl Into<String>) -> Error {
        Error::new(Code::OutOfRange, message)
    }
    pub fn unimplemented(message: impl Into<String>) -> Error {
        Error::new(Code::Unimplemented, message)
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Code::Internal, message)
    }

    /// The same error with `context: ` put before its message.
    pub fn context(self, context: impl fmt::Display) -> Error {
        Error {
            code: self.code,
            message: format!("{context}: {}", self.message),
        }
    }
}

/// The result type of every fallible core function.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_integers() {
        for c in Code::ALL {
            assert_eq!(Code::from_i32(c as i32), Some(c));
        }
        assert_eq!(Code::from_i32(42), None);
        assert_eq!(Code::from_i32(-1), None);
    }

    #[test]
    fn display_carries_code_and_context() {
        let e = Error::invalid_argument("bad shape").context("dp_tensor_create");
        assert_eq!(
            e.to_string(),
            "INVALID_ARGUMENT: dp_tensor_create: bad shape"
        );
    }
}
