//! Leadership as the controller sees it.

use tokio_util::sync::CancellationToken;

use crate::leader;

/// Leadership as the controller sees it: elected through the Lease, or always (no election).
pub(super) enum Election {
    /// `--leader-elect=false`: this replica always leads; the term never ends.
    Off(CancellationToken),
    /// `--leader-elect`.
    On(leader::LeaderElection),
}

impl Election {
    /// Cancelled when leadership is lost; never without election.
    pub(super) fn term(&self) -> CancellationToken {
        match self {
            Election::Off(t) => t.clone(),
            Election::On(e) => e.leadership().term(),
        }
    }

    pub(super) async fn acquired(&mut self) -> bool {
        match self {
            Election::Off(..) => true,
            Election::On(e) => e.acquired().await,
        }
    }

    pub(super) async fn release(self) -> Result<(), leader::LeaderError> {
        match self {
            Election::Off(..) => Ok(()),
            Election::On(e) => e.release().await,
        }
    }
}
