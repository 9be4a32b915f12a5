//! What the API server's answer to an eviction means (`docs/drain-contract.md` §4): the answer
//! table ([`meaning`]), the reading of one answer ([`classify_eviction`]), and the error texts
//! upstream writes for it.

use std::time::Duration;

use kube::core::Status;

use super::budget::SharedCause;
use super::consts::{
    EVACUATION_RETRY_INTERVAL, EVACUATION_TRIGGERED, EVICTION_RETRY_INTERVAL, NOT_LIVE_MIGRATABLE,
    reason, result,
};
use crate::api::{PodBlocker, PodReference};

/// How one eviction request ended, decided from the API server's answer alone.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EvictionOutcome {
    /// Metrics label, one of [`result`]'s constants.
    pub result: crate::metrics::EvictionResult,
    /// Why the pod stays, when it does (namespace and name filled from the pod). For an accepted
    /// eviction this is a `Terminating` blocker: the pod is gone only once it is no longer listed.
    pub blocker: Option<PodBlocker>,
    /// Upstream's lastError text for a failed eviction:
    /// `error when evicting pods/"<pod>" -n "<ns>": <err>`.
    pub error: Option<String>,
    /// The API server's part of `error` (`<err>`), for the other pods a shared refusal holds.
    pub api_error: Option<String>,
    /// Shortest time before the pod is asked again; `None`: it is not (accepted, or gone).
    pub retry: Option<Duration>,
    /// The cause many pods share that the refusal names, if any: one request stands for all
    /// of them until the retry is due.
    pub shared: Option<SharedCause>,
}

impl EvictionOutcome {
    /// A refusal because several budgets select the pod, with their `names` added (the API
    /// server's 500 names none): to the message, and as `podDisruptionBudget` (comma-separated).
    /// Anything else, or no names, stays as it was.
    pub(crate) fn name_budgets(&mut self, names: &[String]) {
        if let Some(b) = self.blocker.as_mut()
            && b.reason == reason::MULTIPLE_PDBS
            && !names.is_empty()
        {
            let msg = b.message.take().unwrap_or_default();
            b.message = Some(format!(
                "{msg} (budgets selecting the pod: {})",
                names.join(", ")
            ));
            b.pod_disruption_budget = Some(names.join(","));
        }
    }
}

/// The kinds of answer to an eviction request, as [`classify_eviction`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 2xx: accepted.
    Evicted,
    /// 404, or 409 from the UID precondition (a same-named pod replaced it).
    Gone,
    /// 429 with a `DisruptionBudget` cause.
    Budget,
    /// A 429 that says its responder is evacuating the pod ([`EVACUATION_TRIGGERED`]), or any
    /// other 429 for a pod carrying [`EVICTION_IN_PROGRESS_ANNOTATION`].
    Evacuating,
    /// KubeVirt's 429 for a VMI that must live-migrate and cannot ([`NOT_LIVE_MIGRATABLE`]).
    NotMigratable,
    /// Another 429 (a webhook's rate limit).
    TooManyRequests,
    /// 500 "This pod has more than one PodDisruptionBudget".
    MultipleBudgets,
    /// 403 with a `NamespaceTerminating` cause.
    NamespaceTerminating,
    /// Anything else (a webhook's denial, a transport error).
    Error,
}

/// One row of the answer table: what an answer means for the pod and the round after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meaning {
    /// Metrics label.
    pub result: crate::metrics::EvictionResult,
    /// `status.blockers[].reason` while the pod stays; `None`: it is gone.
    pub reason: Option<&'static str>,
    /// Shortest time before the pod is asked again; `None`: never (accepted, or gone).
    pub retry: Option<Duration>,
    /// Whether it is an error (`lastError`, upstream's text).
    pub error: bool,
    /// Whether the refusal names a cause many pods share ([`SharedCause`]).
    pub shared: bool,
}

/// The answer table (`docs/drain-contract.md` §4): answer → blocker reason, retry interval,
/// error or not, shared or not. Every decision about an answer reads it; the retry interval is
/// upstream's `waitDurationOnDrainError` (5 s) for every refusal but an evacuation's
/// ([`EVACUATION_RETRY_INTERVAL`]), which is progress, not an error (§4a).
pub(crate) const fn meaning(answer: Answer) -> Meaning {
    const fn refused(
        result: crate::metrics::EvictionResult,
        reason: &'static str,
        shared: bool,
    ) -> Meaning {
        Meaning {
            result,
            reason: Some(reason),
            retry: Some(EVICTION_RETRY_INTERVAL),
            error: true,
            shared,
        }
    }
    match answer {
        Answer::Evicted => Meaning {
            result: result::EVICTED,
            reason: Some(reason::TERMINATING),
            retry: None,
            error: false,
            shared: false,
        },
        Answer::Gone => Meaning {
            result: result::GONE,
            reason: None,
            retry: None,
            error: false,
            shared: false,
        },
        Answer::Budget => refused(result::BLOCKED_PDB, reason::PDB, true),
        Answer::Evacuating => Meaning {
            result: result::TOO_MANY_REQUESTS,
            reason: Some(reason::EVACUATING),
            retry: Some(EVACUATION_RETRY_INTERVAL),
            error: false,
            shared: false,
        },
        Answer::NotMigratable => refused(result::TOO_MANY_REQUESTS, reason::NOT_MIGRATABLE, false),
        Answer::TooManyRequests => {
            refused(result::TOO_MANY_REQUESTS, reason::TOO_MANY_REQUESTS, false)
        }
        Answer::MultipleBudgets => refused(result::ERROR, reason::MULTIPLE_PDBS, false),
        Answer::NamespaceTerminating => refused(result::ERROR, reason::NAMESPACE_TERMINATING, true),
        Answer::Error => refused(result::ERROR, reason::EVICTION_ERROR, false),
    }
}

/// Go's `err.Error()` for an API error is the Status message; other errors print as kube prints
/// them.
pub(crate) fn error_text(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        kube::Error::Api(s) => format!("{} ({})", s.reason, s.code),
        other => other.to_string(),
    }
}

/// Upstream's lastError text of a refused eviction of `pod` (kubectl's drain library).
pub(crate) fn evicting_error(pod: &PodReference, error: &str) -> String {
    format!(
        "error when evicting pods/\"{}\" -n \"{}\": {error}",
        pod.name, pod.namespace
    )
}

fn cause<'a>(status: &'a Status, kind: &str) -> Option<&'a str> {
    status
        .details
        .as_ref()?
        .causes
        .iter()
        .find(|c| c.reason == kind)
        .map(|c| c.message.as_str())
}

/// Parsed `DisruptionBudget` cause of a 429: the budget's name and, in the
/// `The disruption budget <pdb> needs <desired> healthy pods and has <current> currently` form,
/// the healthy pods it needs and has. Also accepts `… is still being processed by the server.`
/// and `… does not allow evicting pods currently …` (no counts).
pub(crate) fn parse_pdb_cause(message: &str) -> Option<(String, Option<i32>, Option<i32>)> {
    let rest = message.strip_prefix("The disruption budget ")?;
    let (name, rest) = rest.split_once(' ')?;
    let counts = rest
        .strip_prefix("needs ")
        .and_then(|r| r.split_once(" healthy pods and has "))
        .and_then(|(desired, r)| {
            let current = r.split_whitespace().next()?;
            Some((desired.parse().ok()?, current.parse().ok()?))
        });
    Some((name.to_string(), counts.map(|c| c.0), counts.map(|c| c.1)))
}

/// Which row of the answer table an answer is: 2xx evicted, 404 gone, 409 from the UID
/// precondition gone, 429 with a `DisruptionBudget` cause a budget, a 429 saying
/// [`EVACUATION_TRIGGERED`] evacuating, one saying [`NOT_LIVE_MIGRATABLE`] not migratable, any
/// other 429 evacuating when the pod carries the in-progress annotation (`in_progress`: its
/// responder has taken over) and too many requests otherwise, 500 "more than one
/// PodDisruptionBudget" multiple budgets, 403 with a `NamespaceTerminating` cause namespace
/// terminating, anything else an error.
pub(crate) fn answer_of(answer: Result<(), &kube::Error>, in_progress: bool) -> Answer {
    let Err(err) = answer else {
        return Answer::Evicted;
    };
    let kube::Error::Api(status) = err else {
        return Answer::Error;
    };
    match status.code {
        _ if status.is_not_found() => Answer::Gone,
        _ if status.is_conflict() && status.message.contains("Precondition failed") => Answer::Gone,
        429 if cause(status, "DisruptionBudget").is_some() => Answer::Budget,
        429 if status.message.contains(EVACUATION_TRIGGERED) => Answer::Evacuating,
        429 if status.message.contains(NOT_LIVE_MIGRATABLE) => Answer::NotMigratable,
        429 if in_progress => Answer::Evacuating,
        429 => Answer::TooManyRequests,
        500 if status.message.contains("more than one PodDisruptionBudget") => {
            Answer::MultipleBudgets
        }
        403 if cause(status, "NamespaceTerminating").is_some() => Answer::NamespaceTerminating,
        _ => Answer::Error,
    }
}

/// Classifies the answer to an eviction of `pod` through the answer table ([`meaning`]): the
/// blocker with the API server's text (a budget's name and healthy counts parsed from its
/// cause), upstream's lastError text (none for an evacuation), the retry and the shared cause.
/// `in_progress`: the pod carried [`EVICTION_IN_PROGRESS_ANNOTATION`] when the round listed it.
/// Never retries: the next pass does.
pub(crate) fn classify_eviction(
    pod: &PodReference,
    in_progress: bool,
    answer: Result<(), &kube::Error>,
) -> EvictionOutcome {
    let kind = answer_of(answer, in_progress);
    let row = meaning(kind);
    let api_error = answer.err().map(error_text);
    let status = match answer {
        Err(kube::Error::Api(s)) => Some(s),
        _ => None,
    };
    let message = match (kind, status) {
        (Answer::Evicted, _) => "evicted; waiting for the pod to terminate".to_string(),
        (Answer::Budget, Some(s)) => format!(
            "{}: {}",
            s.message,
            cause(s, "DisruptionBudget").unwrap_or_default()
        ),
        (
            Answer::TooManyRequests
            | Answer::Evacuating
            | Answer::NotMigratable
            | Answer::MultipleBudgets
            | Answer::NamespaceTerminating,
            Some(s),
        ) => s.message.clone(),
        _ => api_error.clone().unwrap_or_default(),
    };
    let mut blocker = row
        .reason
        .map(|reason| PodBlocker::of(pod, reason, message));
    let mut shared = None;
    if kind == Answer::Budget
        && let Some((pdb, desired, current)) = status
            .and_then(|s| cause(s, "DisruptionBudget"))
            .and_then(parse_pdb_cause)
        && let Some(b) = blocker.as_mut()
    {
        b.desired_healthy = desired;
        b.current_healthy = current;
        shared = Some(SharedCause::Budget {
            namespace: pod.namespace.clone(),
            name: pdb.clone(),
        });
        b.pod_disruption_budget = Some(pdb);
    }
    if kind == Answer::NamespaceTerminating {
        shared = Some(SharedCause::NamespaceTerminating {
            namespace: pod.namespace.clone(),
        });
    }
    EvictionOutcome {
        result: row.result,
        blocker,
        error: row
            .error
            .then(|| evicting_error(pod, api_error.as_deref().unwrap_or_default())),
        api_error: api_error.filter(|_| row.error),
        retry: row.retry,
        shared: shared.filter(|_| row.shared),
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: `None` for none, the text itself for one,
/// `[e1, e2]` for several (duplicates dropped, order kept). Bounded (ours): at most
/// [`crate::bounds::MAX_ERRORS`] texts, each cut to [`bounds::MAX_ERROR`] bytes, then
/// `and N more errors` inside the brackets.
pub(crate) fn aggregate_errors(errors: &[String]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&str> = errors
        .iter()
        .filter(|e| seen.insert(e.as_str()))
        .map(String::as_str)
        .collect();
    let mut shown: Vec<String> = unique
        .iter()
        .take(crate::bounds::MAX_ERRORS)
        .map(|e| crate::bounds::truncate(e, crate::bounds::MAX_ERROR))
        .collect();
    if unique.len() > crate::bounds::MAX_ERRORS {
        shown.push(format!(
            "and {} more errors",
            unique.len() - crate::bounds::MAX_ERRORS
        ));
    }
    match shown.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}
