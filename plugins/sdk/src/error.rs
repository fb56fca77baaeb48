//! Errors: a [`Status`] code (the ABI's `DPP_*` values) plus a message. The SDK hands both to
//! the host (`set_error` + the returned code) whenever a plugin function returns `Err`.

use std::fmt;

use devplug_plugin_abi as abi;

/// A failure code. The values are the ABI's `DPP_*` status codes (and the host API's `DP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// An argument is invalid (`DPP_INVALID_ARGUMENT`).
    InvalidArgument,
    /// A named thing does not exist (`DPP_NOT_FOUND`).
    NotFound,
    /// A thing with that name exists already (`DPP_ALREADY_EXISTS`).
    AlreadyExists,
    /// Out of memory or another resource (`DPP_RESOURCE_EXHAUSTED`).
    ResourceExhausted,
    /// The state does not allow the operation (`DPP_FAILED_PRECONDITION`).
    FailedPrecondition,
    /// Not implemented (`DPP_UNIMPLEMENTED`).
    Unimplemented,
    /// A bug, e.g. a panic caught at the boundary (`DPP_INTERNAL`).
    Internal,
    /// The device is unavailable (`DPP_UNAVAILABLE`).
    Unavailable,
    /// Incompatible ABI versions (`DPP_ABI_MISMATCH`).
    AbiMismatch,
}

impl Status {
    /// The ABI code (`DPP_*`).
    pub const fn code(self) -> abi::dpp_status_t {
        match self {
            Status::InvalidArgument => abi::DPP_INVALID_ARGUMENT,
            Status::NotFound => abi::DPP_NOT_FOUND,
            Status::AlreadyExists => abi::DPP_ALREADY_EXISTS,
            Status::ResourceExhausted => abi::DPP_RESOURCE_EXHAUSTED,
            Status::FailedPrecondition => abi::DPP_FAILED_PRECONDITION,
            Status::Unimplemented => abi::DPP_UNIMPLEMENTED,
            Status::Internal => abi::DPP_INTERNAL,
            Status::Unavailable => abi::DPP_UNAVAILABLE,
            Status::AbiMismatch => abi::DPP_ABI_MISMATCH,
        }
    }

    /// The status of an ABI code; `None` for `DPP_OK` and for codes the ABI does not define.
    pub const fn from_code(code: abi::dpp_status_t) -> Option<Status> {
        Some(match code {
            abi::DPP_INVALID_ARGUMENT => Status::InvalidArgument,
            abi::DPP_NOT_FOUND => Status::NotFound,
            abi::DPP_ALREADY_EXISTS => Status::AlreadyExists,
            abi::DPP_RESOURCE_EXHAUSTED => Status::ResourceExhausted,
            abi::DPP_FAILED_PRECONDITION => Status::FailedPrecondition,
            abi::DPP_UNIMPLEMENTED => Status::Unimplemented,
            abi::DPP_INTERNAL => Status::Internal,
            abi::DPP_UNAVAILABLE => Status::Unavailable,
            abi::DPP_ABI_MISMATCH => Status::AbiMismatch,
            _ => return None,
        })
    }

    /// The code's name as the C header spells it, without the prefix (`INVALID_ARGUMENT`).
    pub const fn name(self) -> &'static str {
        match self {
            Status::InvalidArgument => "INVALID_ARGUMENT",
            Status::NotFound => "NOT_FOUND",
            Status::AlreadyExists => "ALREADY_EXISTS",
            Status::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Status::FailedPrecondition => "FAILED_PRECONDITION",
            Status::Unimplemented => "UNIMPLEMENTED",
            Status::Internal => "INTERNAL",
            Status::Unavailable => "UNAVAILABLE",
            Status::AbiMismatch => "ABI_MISMATCH",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failure: a [`Status`] and a message for the host (and, through it, the user).
///
/// `Display` shows the message only; the code is [`Error::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    code: Status,
    message: String,
}

/// The SDK's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with `code` and `message`.
    pub fn new(code: Status, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// `Status::InvalidArgument`.
    pub fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }

    /// `Status::NotFound`.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(Status::NotFound, message)
    }

    /// `Status::AlreadyExists`.
    pub fn already_exists(message: impl Into<String>) -> Error {
        Error::new(Status::AlreadyExists, message)
    }

    /// `Status::ResourceExhausted`.
    pub fn resource_exhausted(message: impl Into<String>) -> Error {
        Error::new(Status::ResourceExhausted, message)
    }

    /// `Status::FailedPrecondition`.
    pub fn failed_precondition(message: impl Into<String>) -> Error {
        Error::new(Status::FailedPrecondition, message)
    }

    /// `Status::Unimplemented`.
    pub fn unimplemented(message: impl Into<String>) -> Error {
        Error::new(Status::Unimplemented, message)
    }

    /// `Status::Internal`.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(Status::Internal, message)
    }

    /// `Status::Unavailable`.
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(Status::Unavailable, message)
    }

    /// `Status::Internal` for a panic that [`std::panic::catch_unwind`] caught: the message
    /// is `panicked: ` and the panic's text (its `&str` or `String` payload). Drops the
    /// payload.
    ///
    /// The SDK reports a panic in a method it called this way; use it where you catch panics
    /// yourself, e.g. in a stream's worker thread, so that the job's panic becomes the
    /// stream's error (which `synchronize_stream` returns) instead of killing the worker:
    ///
    /// ```
    /// # use devplug_plugin_sdk::{Error, Result, Status};
    /// let job = || -> Result<()> { panic!("bad job") };
    /// let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
    ///     .unwrap_or_else(|payload| Err(Error::from_panic(payload)));
    /// let err = result.unwrap_err();
    /// assert_eq!((err.code(), err.message()), (Status::Internal, "panicked: bad job"));
    /// ```
    pub fn from_panic(payload: Box<dyn std::any::Any + Send>) -> Error {
        Error::internal(format!("panicked: {}", crate::ffi::panic_text(payload)))
    }

    /// The code.
    pub fn code(&self) -> Status {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context: ` in front of its message.
    pub fn context(mut self, context: impl fmt::Display) -> Error {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_the_abi() {
        let all = [
            Status::InvalidArgument,
            Status::NotFound,
            Status::AlreadyExists,
            Status::ResourceExhausted,
            Status::FailedPrecondition,
            Status::Unimplemented,
            Status::Internal,
            Status::Unavailable,
            Status::AbiMismatch,
        ];
        for s in all {
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        assert_eq!(Status::Internal.code(), abi::DPP_INTERNAL);
        assert_eq!(Status::from_code(abi::DPP_OK), None);
        assert_eq!(Status::from_code(77), None);
    }

    #[test]
    fn errors_carry_code_and_message() {
        let e = Error::resource_exhausted("no room").context("allocate(64)");
        assert_eq!(e.code(), Status::ResourceExhausted);
        assert_eq!(e.message(), "allocate(64): no room");
        assert_eq!(e.to_string(), "allocate(64): no room");
    }
}
