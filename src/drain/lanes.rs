//! One eviction in flight per PodDisruptionBudget (`docs/drain-contract.md` §1, "How fast a
//! budget that allows is drained"). The API server accepts an eviction of a budget's pod by
//! updating that budget's status (`disruptionsAllowed` less one, the pod added to
//! `disruptedPods`), under optimistic concurrency: evictions of one budget's pods sent at once
//! conflict there, and the API server retries each loser after 500 ms, up to 20 times, then
//! answers 504 (`pkg/registry/core/pod/storage/eviction.go`, `EvictionsRetry`). Sent one after
//! the other they never conflict, so a budget that allows every pod is drained at the API
//! server's pace. Evictions of pods no budget covers, and of different budgets, are not held back.
//!
//! Pacing only: which pods to evict is the round's decision; this is how the executor sends them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::SharedCause;

/// The lanes of the budgets with an eviction in flight or waiting, by budget.
#[derive(Clone, Default)]
pub(crate) struct BudgetLanes {
    lanes: Arc<Mutex<HashMap<SharedCause, Arc<tokio::sync::Mutex<()>>>>>,
}

/// The right to send the one eviction of a budget's pod; the next waits until it is dropped.
pub(crate) struct Lane {
    cause: SharedCause,
    lanes: BudgetLanes,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl BudgetLanes {
    /// Waits for the lane of `cause` when it is a budget; `None` (at once) for any other cause
    /// and for none.
    pub(crate) async fn enter(&self, cause: Option<&SharedCause>) -> Option<Lane> {
        let cause = cause.filter(|c| matches!(c, SharedCause::Budget { .. }))?;
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            lanes.entry(cause.clone()).or_default().clone()
        };
        let guard = lane.lock_owned().await;
        Some(Lane {
            cause: cause.clone(),
            lanes: self.clone(),
            guard: Some(guard),
        })
    }

    /// How many budgets have a lane (one in flight or waiting).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lanes.lock().unwrap().len()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The last user of a lane removes it: the map holds only the budgets in use.
        let mut lanes = self.lanes.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if lanes
            .get(&self.cause)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            lanes.remove(&self.cause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(name: &str) -> SharedCause {
        SharedCause::Budget {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn one_eviction_in_flight_per_budget_and_none_held_back_otherwise() {
        let lanes = BudgetLanes::default();
        let a = lanes
            .enter(Some(&budget("a")))
            .await
            .expect("a budget's lane");
        // Another budget's pod, a pod no budget covers, a namespace's cause: not held back.
        let b = lanes.enter(Some(&budget("b"))).await;
        assert!(b.is_some());
        let ns = SharedCause::NamespaceTerminating {
            namespace: "ns".into(),
        };
        assert!(lanes.enter(Some(&ns)).await.is_none());
        assert!(lanes.enter(None).await.is_none());
        // The same budget's next eviction waits for the first one's answer.
        let a_again = budget("a");
        let next = lanes.enter(Some(&a_again));
        tokio::pin!(next);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut next)
                .await
                .is_err(),
            "a second eviction of budget a went out while the first was in flight"
        );
        drop(a);
        let second = next.await;
        assert!(second.is_some());
        drop((second, b));
        assert_eq!(lanes.len(), 0, "no lane kept for budgets no longer in use");
    }
}
