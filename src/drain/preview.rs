//! The stage Preflight's dry runs, asked as the drain asks (`docs/drain-contract.md` §1,
//! "Causes many pods share"): a PodDisruptionBudget that allows no disruption refuses every pod
//! it covers with the same answer, so it is asked through one of its pods and its other pods
//! take that answer. A preview of a node of 2,000 pods under such a budget is then one request
//! every 60 s, not 2,000.
//!
//! Pure: [`asks`] says which pods are asked, [`follow`] what an unasked pod's answer is once its
//! budget's probe has answered. `Drainer::preflight` sends the dry runs.

use super::budget::Budgets;
use super::consts::reason;
use super::pod::DrainPod;
use crate::api::PodBlocker;

/// How a pod of the preview is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A dry-run eviction of its own.
    Dry,
    /// The answer of the pod at this index (an earlier one, asked), when that answer is a
    /// refusal naming `budget`; else a dry run of its own after all ([`follow`]).
    Follow {
        /// Index of the budget's probe among the pods given to [`asks`].
        probe: usize,
        /// The budget's name.
        budget: String,
    },
}

/// For each of `pods`, in order, how it is answered: a pod whose one covering budget
/// (`Budgets::covering`: exactly one, known) allows no disruption and decides its eviction
/// (`Budget::decides`: not one the API server lets go without it) follows the first such pod
/// of that budget, which is asked; every other pod is asked (a budget that allows some accepts each dry
/// run, since a dry run consumes nothing; a pod under several budgets is refused with 500 on
/// its own; unknown budgets: every pod is asked, as before the budgets are listed).
pub(crate) fn asks(pods: &[&DrainPod], budgets: &Budgets) -> Vec<Ask> {
    let mut probes: std::collections::HashMap<super::budget::SharedCause, usize> =
        std::collections::HashMap::new();
    pods.iter()
        .enumerate()
        .map(|(i, pod)| {
            let shared = budgets
                .covering(&pod.metadata.namespace, &pod.metadata.labels)
                .filter(|b| b.allowed == 0 && b.decides(pod));
            match shared {
                None => Ask::Dry,
                Some(b) => match probes.entry(b.cause()) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i);
                        Ask::Dry
                    }
                    std::collections::hash_map::Entry::Occupied(o) => Ask::Follow {
                        probe: *o.get(),
                        budget: b.name.clone(),
                    },
                },
            }
        })
        .collect()
}

/// The answer of `pod`, which followed its budget's probe: the probe's refusal, as the pod's
/// own blocker, when it is a `PodDisruptionBudget` refusal naming `budget` (the text the drain
/// reports for the pods a refusal holds, `RetryEntry::for_pod`); `None` when the probe was
/// accepted or refused for another reason, so `pod` must be asked itself.
pub(crate) fn follow(
    probe: Option<&PodBlocker>,
    budget: &str,
    pod: &DrainPod,
) -> Option<PodBlocker> {
    let refusal = probe?;
    (refusal.reason == reason::PDB && refusal.pod_disruption_budget.as_deref() == Some(budget))
        .then(|| refusal.for_pod(&pod.reference()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Budget;

    fn pod(ns: &str, name: &str, app: &str) -> DrainPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn budget(ns: &str, name: &str, app: &str, allowed: i32) -> Budget {
        Budget::over_app(ns, name, app, allowed, 3)
    }

    fn refusal(ns: &str, name: &str, budget: &str) -> PodBlocker {
        PodBlocker {
            namespace: ns.into(),
            name: name.into(),
            reason: reason::PDB.into(),
            message: Some(format!(
                "The disruption budget {budget} needs 3 healthy pods"
            )),
            pod_disruption_budget: Some(budget.into()),
            desired_healthy: Some(3),
            current_healthy: Some(3),
            ..PodBlocker::default()
        }
    }

    #[test]
    fn a_budget_that_allows_none_is_asked_through_its_first_pod_the_others_each() {
        let pods = [
            pod("a", "free-0", "free"),
            pod("a", "db-0", "db"),
            pod("a", "db-1", "db"),
            pod("b", "db-0", "db"),
            pod("a", "web-0", "web"),
            pod("a", "db-2", "db"),
            pod("a", "both-0", "both"),
            pod("a", "web-1", "web"),
        ];
        let pods: Vec<&DrainPod> = pods.iter().collect();
        let budgets = Budgets::known([
            budget("a", "db", "db", 0),
            budget("b", "db", "db", 0),
            // Allows some: every dry run of it is accepted, each pod is asked.
            budget("a", "web", "web", 2),
            // Two budgets over one pod: refused with 500 whatever they allow.
            budget("a", "both-1", "both", 0),
            budget("a", "both-2", "both", 0),
        ]);
        let follow = |probe: usize, budget: &str| Ask::Follow {
            probe,
            budget: budget.into(),
        };
        assert_eq!(
            asks(&pods, &budgets),
            vec![
                Ask::Dry,
                Ask::Dry,
                follow(1, "db"),
                // Same name, another namespace: another budget.
                Ask::Dry,
                Ask::Dry,
                follow(1, "db"),
                Ask::Dry,
                Ask::Dry,
            ]
        );
        // A pod the budget does not decide for (not Ready while the budget has its healthy pods,
        // or Pending) is asked on its own.
        let unready: DrainPod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "a", "name": "db-unready", "labels": {"app": "db"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let pending: DrainPod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "a", "name": "db-pending", "labels": {"app": "db"}},
            "status": {"phase": "Pending"}
        }))
        .unwrap();
        let db = pod("a", "db-0", "db");
        assert_eq!(
            asks(&[&unready, &pending, &db, &db], &budgets),
            vec![Ask::Dry, Ask::Dry, Ask::Dry, follow(2, "db")]
        );
        // Budgets not listed yet: every pod is asked.
        assert!(
            asks(&pods, &Budgets::default())
                .iter()
                .all(|a| *a == Ask::Dry)
        );
    }

    #[test]
    fn a_follower_takes_its_budgets_refusal_else_is_asked_itself() {
        let db1 = pod("a", "db-1", "db");
        let refused = refusal("a", "db-0", "db");
        assert_eq!(
            follow(Some(&refused), "db", &db1),
            Some(refusal("a", "db-1", "db"))
        );
        // The probe went through (the budget allowed one meanwhile), or another cause refused it
        // (a webhook, another budget): the follower's own answer is asked for.
        assert_eq!(follow(None, "db", &db1), None);
        assert_eq!(
            follow(Some(&refusal("a", "db-0", "other")), "db", &db1),
            None
        );
        let webhook = PodBlocker {
            reason: "EvictionRefused".into(),
            pod_disruption_budget: None,
            ..refused
        };
        assert_eq!(follow(Some(&webhook), "db", &db1), None);
    }
}
