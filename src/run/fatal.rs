//! The first fatal error of the process, and the tasks whose end is one.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::error::RunError;

/// The first fatal error of the process; recording one cancels the root token.
#[derive(Clone, Default)]
pub(super) struct Fatal(Arc<Mutex<Option<RunError>>>);

impl Fatal {
    pub(super) fn raise(&self, root: &CancellationToken, e: RunError) {
        let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(e);
        }
        root.cancel();
    }

    pub(super) fn take(&self) -> Result<(), RunError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map_or(Ok(()), Err)
    }
}

/// Spawns a task that must not end while the process runs: when it ends before shutdown, its
/// error is raised and the root cancelled.
pub(super) fn essential(
    root: &CancellationToken,
    fatal: &Fatal,
    task: impl Future<Output = RunError> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let (root, fatal) = (root.clone(), fatal.clone());
    tokio::spawn(async move {
        let e = task.await;
        match e {
            // Ending cleanly after the shutdown began is the expected way to end.
            RunError::TaskEnded(_) if root.is_cancelled() => {}
            e => fatal.raise(&root, e),
        }
    })
}
