//! The constructors the crate makes errors with: each says once how an error of its kind
//! is built (an `InvalidUrl` with its password hidden, a driver's error kept as the
//! `source()`), and [`Error::copy`] hands one error to several callers. Apart from the
//! enum so that the list of what a user sees (`mod.rs`) is not interrupted by how the
//! crate builds it.

use super::{cause, Cause, Error};

impl Error {
    /// `InvalidUrl` for `url`, with its password hidden in the URL and in the reason
    /// (which may quote a piece of it). Every `InvalidUrl` is made here.
    pub(crate) fn invalid_url(url: &str, reason: impl std::fmt::Display) -> Error {
        Error::InvalidUrl {
            url: crate::redact::url(url),
            reason: crate::redact::scrub(&reason.to_string(), url),
        }
    }

    /// `InvalidUrl` for a URL whose scheme lives behind a Cargo feature this build of
    /// leafid leaves out: names the feature to enable.
    #[allow(dead_code)] // unused when every feature is on
    pub(crate) fn feature_left_out(url: &str, feature: &str) -> Error {
        Error::invalid_url(
            url,
            format_args!(
                "this build of leafid leaves out the `{feature}` Cargo feature that this scheme \
                 needs; enable it (leafid = {{ version = \"…\", features = [\"{feature}\"] }}) \
                 or use another URL"
            ),
        )
    }

    /// `StoreUnavailable` with a text cause only (leafid found it, no driver error).
    pub(crate) fn store(e: impl std::fmt::Display) -> Error {
        Error::StoreUnavailable {
            cause: e.to_string(),
            source: None,
        }
    }

    /// `StoreUnavailable` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn store_with(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::StoreUnavailable {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// `RegistryUnavailable` with a text cause only.
    pub(crate) fn registry(e: impl std::fmt::Display) -> Error {
        Error::RegistryUnavailable {
            cause: e.to_string(),
            source: None,
        }
    }

    /// `RegistryUnavailable` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn registry_with(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::RegistryUnavailable {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// `AccessDenied` saying `text`, keeping the driver's error as its source.
    #[allow(dead_code)] // unused when no driver feature (mysql, sqlite, zookeeper) is on
    pub(crate) fn access_denied(text: impl std::fmt::Display, cause: Cause) -> Error {
        Error::AccessDenied {
            cause: text.to_string(),
            source: Some(cause),
        }
    }

    /// A copy of this error for one more caller (`Error` is not `Clone`: `Io` holds an
    /// `io::Error`). Every variant a refill, lookup or registry call can store is kept
    /// as it is, source included; any other becomes `StoreUnavailable` with its text
    /// (and its cause, if any).
    pub(crate) fn copy(&self) -> Error {
        match self {
            Error::InvalidConfig(s) => Error::InvalidConfig(s.clone()),
            Error::InvalidTag { tag, reason } => Error::InvalidTag {
                tag: tag.clone(),
                reason: reason.clone(),
            },
            Error::InvalidUrl { url, reason } => Error::InvalidUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            Error::Malformed { what, path, reason } => Error::Malformed {
                what,
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::TagNotFound { tag } => Error::TagNotFound { tag: tag.clone() },
            Error::TableMissing { table } => Error::TableMissing {
                table: table.clone(),
            },
            Error::StoreUnavailable { cause, source } => Error::StoreUnavailable {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::RegistryUnavailable { cause, source } => Error::RegistryUnavailable {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::AccessDenied { cause, source } => Error::AccessDenied {
                cause: cause.clone(),
                source: source.clone(),
            },
            Error::Closed => Error::Closed,
            Error::Io { path, source } => Error::StoreUnavailable {
                cause: format!("I/O error on {path}: {source}"),
                source: Some(Cause::new(
                    cause::io_kind(source),
                    std::io::Error::new(source.kind(), source.to_string()),
                )),
            },
            other => Error::StoreUnavailable {
                cause: other.to_string(),
                source: other.cause().cloned(),
            },
        }
    }

    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}
