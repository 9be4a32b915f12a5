//! Logging set-up: tracing-subscriber writing text or JSON lines to stderr.
//!
//! JSON lines carry the event's fields at the top level (`flatten_event`), next to `timestamp`,
//! `level`, `target` and the current span, so log pipelines can index `node` or `name` directly.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// Errors of [`init`].
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The `--log-level` / `RUST_LOG` value is not a valid tracing filter.
    #[error("invalid --log-level {filter:?}: {source}")]
    Filter {
        /// The rejected text.
        filter: String,
        /// Why tracing-subscriber rejected it.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed (only possible in tests).
    #[error("logging was already initialised: {0}")]
    AlreadyInitialised(#[from] tracing_subscriber::util::TryInitError),
}

/// Builds the log filter from `--log-level` (which clap already fills from `RUST_LOG` when the
/// flag is absent). A bare level such as `info` applies to every crate.
///
/// # Errors
/// [`TelemetryError::Filter`] when the text is not a valid directive list.
pub(crate) fn filter(level: &str) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::builder()
        .parse(level)
        .map_err(|source| TelemetryError::Filter {
            filter: level.to_string(),
            source,
        })
}

/// Installs the global subscriber writing to stderr in `format`, filtered by `level`.
///
/// # Errors
/// [`TelemetryError::Filter`] for a bad filter; [`TelemetryError::AlreadyInitialised`] when a
/// global subscriber exists already.
pub fn init(level: &str, format: LogFormat) -> Result<(), TelemetryError> {
    let filter = filter(level)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal: container logs must not carry escape codes.
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.finish().try_init()?,
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .try_init()?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_parse() {
        for ok in [
            "info",
            "debug",
            "warn,node_maintenance_operator=trace",
            "kube=debug",
        ] {
            assert!(filter(ok).is_ok(), "{ok}");
        }
        let err = filter("info,=[").unwrap_err().to_string();
        assert!(err.starts_with("invalid --log-level"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
