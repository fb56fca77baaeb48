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
    /// Success (C `DP_OK`); never in an [`Error`].
    Ok = 0,
    /// The operation was cancelled.
    Cancelled = 1,
    /// An error of no other kind.
    Unknown = 2,
    /// A bad argument: a malformed shape, spec or definition, a wrong dtype or attribute, an
    /// object of another runtime.
    InvalidArgument = 3,
    /// A deadline passed.
    DeadlineExceeded = 4,
    /// Something named does not exist: an op, a device, a plugin file, a kernel for an op.
    NotFound = 5,
    /// A name is taken: an op, a platform, a kernel of equal priority.
    AlreadyExists = 6,
    /// Not allowed.
    PermissionDenied = 7,
    /// Out of memory, or past a memory limit.
    ResourceExhausted = 8,
    /// The system is not in a state the call needs (e.g. an event never recorded).
    FailedPrecondition = 9,
    /// The operation was aborted.
    Aborted = 10,
    /// A value past its valid range (e.g. a buffer offset).
    OutOfRange = 11,
    /// Not implemented by this device or plugin.
    Unimplemented = 12,
    /// A broken invariant: a bug in devplug, a plugin or host code (a panicking callback).
    Internal = 13,
    /// A transient failure; retrying may help.
    Unavailable = 14,
    /// Data was lost or corrupted (e.g. a bool tensor holding a byte other than 0 or 1).
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
    /// What kind of failure; match on it, not on the message.
    pub code: Code,
    /// What happened, naming the op, operand, device or file involved (without the code).
    pub message: String,
}

impl Error {
    /// An error of `code` (never [`Code::Ok`]) with `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        debug_assert!(code != Code::Ok, "an Error never carries Code::Ok");
        Error {
            code,
            message: message.into(),
        }
    }
    /// A [`Code::InvalidArgument`] error.
    pub fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Code::InvalidArgument, message)
    }
    /// A [`Code::NotFound`] error.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Code::NotFound, message)
    }
    /// A [`Code::AlreadyExists`] error.
    pub fn already_exists(message: impl Into<String>) -> Error {
        Error::new(Code::AlreadyExists, message)
    }
    /// A [`Code::FailedPrecondition`] error.
    pub fn failed_precondition(message: impl Into<String>) -> Error {
        Error::new(Code::FailedPrecondition, message)
    }
    /// A [`Code::ResourceExhausted`] error.
    pub fn resource_exhausted(message: impl Into<String>) -> Error {
        Error::new(Code::ResourceExhausted, message)
    }
    /// A [`Code::OutOfRange`] error.
    pub fn out_of_range(message: impl Into<String>) -> Error {
        Error::new(Code::OutOfRange, message)
    }
    /// A [`Code::Unimplemented`] error.
    pub fn unimplemented(message: impl Into<String>) -> Error {
        Error::new(Code::Unimplemented, message)
    }
    /// A [`Code::Internal`] error.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Code::Internal, message)
    }

    /// The same error with `context: ` put before its message (an empty message becomes
    /// `context`).
    pub fn context(self, context: impl fmt::Display) -> Error {
        let message = if self.message.is_empty() {
            context.to_string()
        } else {
            format!("{context}: {}", self.message)
        };
        Error {
            code: self.code,
            message,
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
        let e = Error::new(Code::Unknown, "").context("Add: the device setter failed");
        assert_eq!(e.message, "Add: the device setter failed");
    }
}
