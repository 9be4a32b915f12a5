//! At most [`PER_BUDGET`] evictions in flight per PodDisruptionBudget (`docs/drain-contract.md`
//! §1, "How fast a budget that allows is drained"). The API server accepts an eviction of a
//! budget's pod by updating that budget's status (`disruptionsAllowed` less one, the pod added to
//! `disruptedPods`) under optimistic concurrency: evictions of one budget's pods sent at once
//! conflict there (and with the disruption controller's own status writes), and the API server
//! retries each loser after 500 ms, up to 20 times, then answers 504
//! (`pkg/registry/core/pod/storage/eviction.go`, `EvictionsRetry`). Hundreds at once mostly
//! sleep in those retries; one at a time waits for every conflict with the controller. Evictions
//! of pods no budget covers, and of different budgets, are not held back.
//!
//! Pacing only: which pods to evict is the round's decision; this is how the executor sends them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::budget::SharedCause;

/// Evictions of one budget's pods in flight at once. Measured with a bare client on the local
/// control plane (`cargo bench --bench maintenance -- budgetrelents`, 2,000 pods under one budget
/// lowered to `minAvailable: 0`): 1 in flight 154 s, 8 in flight 65 s; the operator's former 256
/// took 97 s.
pub(crate) const PER_BUDGET: usize = 8;

type Semaphore = tokio::sync::Semaphore;

/// The lanes of the budgets with an eviction in flight or waiting, by budget.
#[derive(Clone, Default)]
pub(crate) struct BudgetLanes {
    lanes: Arc<Mutex<HashMap<SharedCause, Arc<Semaphore>>>>,
}

/// The right to send one eviction of a budget's pod; held until its answer.
pub(crate) struct Lane {
    cause: SharedCause,
    lanes: BudgetLanes,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl BudgetLanes {
    /// Waits for a place in the lane of `cause` when it is a budget (fewer than [`PER_BUDGET`]
    /// of its evictions in flight); `None` (at once) for any other cause and for none.
    pub(crate) async fn enter(&self, cause: Option<&SharedCause>) -> Option<Lane> {
        let cause = cause.filter(|c| matches!(c, SharedCause::Budget { .. }))?;
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
            let lane = lanes
                .entry(cause.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(PER_BUDGET)));
            lane.clone()
        };
        // Never closed: the permit comes once one of the budget's evictions is answered.
        let permit = lane.acquire_owned().await.ok();
        Some(Lane {
            cause: cause.clone(),
            lanes: self.clone(),
            permit,
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
        drop(self.permit.take());
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
    async fn at_most_per_budget_evictions_in_flight_per_budget_and_none_held_back_otherwise() {
        let lanes = BudgetLanes::default();
        let mut a = Vec::new();
        for _ in 0..PER_BUDGET {
            a.push(
                lanes
                    .enter(Some(&budget("a")))
                    .await
                    .expect("a budget's lane"),
            );
        }
        // Another budget's pod, a pod no budget covers, a namespace's cause: not held back.
        let b = lanes.enter(Some(&budget("b"))).await;
        assert!(b.is_some());
        let ns = SharedCause::NamespaceTerminating {
            namespace: "ns".into(),
        };
        assert!(lanes.enter(Some(&ns)).await.is_none());
        assert!(lanes.enter(None).await.is_none());
        // The same budget's next eviction waits for one of those answers.
        let a_again = budget("a");
        let next = lanes.enter(Some(&a_again));
        tokio::pin!(next);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut next)
                .await
                .is_err(),
            "more than {PER_BUDGET} evictions of budget a in flight"
        );
        a.pop();
        let second = next.await;
        assert!(second.is_some());
        drop((second, b, a));
        assert_eq!(lanes.len(), 0, "no lane kept for budgets no longer in use");
    }
}
