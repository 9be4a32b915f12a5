//! KubeVirt's live migrations as the drain shows them (`docs/drain-contract.md` §4a): for the
//! launcher pod of a VirtualMachineInstance that is `Evacuating`, the VMI's newest
//! `VirtualMachineInstanceMigration` (label `kubevirt.io/vmi-name=<vmi>`), its name, phase and
//! start time, in the pod's blocker.
//!
//! The migrations come from a watch of `virtualmachineinstancemigrations.kubevirt.io/v1`, started
//! only when discovery finds KubeVirt at start-up and the operator may list them (the optional
//! `manifests/overlays/kubevirt`, chart value `kubevirt.enabled`); on other clusters nothing is
//! watched, asked or logged as an error, and Evacuating blockers carry the responder's text only.
//! A watch, not a read per pod and pass: 50 migrating VMs on a node would otherwise cost 10
//! requests a second.

use std::collections::HashMap;

use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

use super::pod::DrainPod;
use crate::api::PodBlocker;
use crate::watch::optional::{OptionalWatch, Unavailable};

/// KubeVirt's API group and version.
pub(crate) const KUBEVIRT_GROUP_VERSION: &str = "kubevirt.io/v1";
/// The label KubeVirt puts on a migration, naming its VMI.
pub(crate) const VMI_NAME_LABEL: &str = "kubevirt.io/vmi-name";

/// One migration as the drain reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Migration {
    /// Its name.
    pub name: String,
    /// `status.phase` (`Pending`, `Scheduling`, `Scheduled`, `PreparingTarget`, `TargetReady`,
    /// `Running`, `Succeeded`, `Failed`); `None` before the migration controller set one.
    pub phase: Option<String>,
    /// `status.migrationState.startTimestamp`, RFC 3339, when the migration started.
    pub started: Option<String>,
    /// `metadata.creationTimestamp` (the API server's clock), which orders a VMI's migrations.
    pub created: Option<jiff::Timestamp>,
}

impl Migration {
    /// The drain's view of a `VirtualMachineInstanceMigration`, with its VMI's name (its
    /// [`VMI_NAME_LABEL`], else `spec.vmiName`); `None` when it names none.
    pub(crate) fn of(obj: &DynamicObject) -> Option<(String, Self)> {
        let vmi = obj
            .labels()
            .get(VMI_NAME_LABEL)
            .cloned()
            .or_else(|| obj.data["spec"]["vmiName"].as_str().map(str::to_string))?;
        let status = &obj.data["status"];
        Some((
            vmi,
            Self {
                name: obj.name_any(),
                phase: status["phase"].as_str().map(str::to_string),
                started: status["migrationState"]["startTimestamp"]
                    .as_str()
                    .map(str::to_string),
                created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
            },
        ))
    }
}

/// Each VMI's newest migration, and its newest `Failed` one, by `(namespace, vmi)`; empty when
/// KubeVirt is not watched.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Migrations {
    newest: HashMap<(String, String), Migration>,
    failed: HashMap<(String, String), Migration>,
}

/// The phase KubeVirt gives a migration that failed (it then creates the next one after its
/// back-off, `MigrationBackoff` on the VMI).
const FAILED: &str = "Failed";

impl Migrations {
    /// The newest of `migrations` (`(namespace, vmi, migration)`) per VMI, and the newest of
    /// those `Failed`: the latest creation, then the greatest name (two created in one second).
    pub(crate) fn newest(
        migrations: impl IntoIterator<Item = (String, String, Migration)>,
    ) -> Self {
        fn keep(
            map: &mut HashMap<(String, String), Migration>,
            key: &(String, String),
            m: &Migration,
        ) {
            let newer = map
                .get(key)
                .is_none_or(|old| (m.created, &m.name) > (old.created, &old.name));
            if newer {
                map.insert(key.clone(), m.clone());
            }
        }
        let mut all = Self::default();
        for (namespace, vmi, m) in migrations {
            let key = (namespace, vmi);
            if m.phase.as_deref() == Some(FAILED) {
                keep(&mut all.failed, &key, &m);
            }
            keep(&mut all.newest, &key, &m);
        }
        all
    }

    /// The newest migration of VMI `vmi` in `namespace`.
    pub(crate) fn of(&self, namespace: &str, vmi: &str) -> Option<&Migration> {
        self.newest.get(&(namespace.to_string(), vmi.to_string()))
    }

    /// The migration of VMI `vmi` that failed and is not yet followed by one that runs: the
    /// newest `Failed` one, created at or after `since` (the drain's start: an older failure is
    /// not this evacuation's), while the newest migration is that one or one that has not
    /// started (no phase, `Pending`, `Scheduling`: KubeVirt's back-off).
    pub(crate) fn failed(
        &self,
        namespace: &str,
        vmi: &str,
        since: Option<jiff::Timestamp>,
    ) -> Option<&Migration> {
        let key = (namespace.to_string(), vmi.to_string());
        let failed = self.failed.get(&key)?;
        if since.is_some_and(|t| failed.created.is_some_and(|c| c < t)) {
            return None;
        }
        let newest = self.newest.get(&key)?;
        let waiting = matches!(
            newest.phase.as_deref(),
            None | Some("Pending" | "Scheduling")
        );
        (newest.name == failed.name || waiting).then_some(failed)
    }
}

/// The VMI a pod is the launcher of: its controller is a `kubevirt.io` VirtualMachineInstance.
pub(crate) fn launcher_of(pod: &DrainPod) -> Option<&str> {
    pod.controller_ref()
        .filter(|o| {
            o.kind == "VirtualMachineInstance"
                && super::pod::api_group(&o.api_version) == "kubevirt.io"
        })
        .map(|o| o.name.as_str())
}

/// Puts into the `Evacuating` blocker `b` of the launcher pod of VMI `vmi` the VMI's name and,
/// when one is known, its newest migration: name, phase and start time. When the VMI's
/// migration failed since `since` and none runs yet ([`Migrations::failed`]), the blocker is
/// `MigrationFailed` naming the failed one, and the failed migration's name and the failure's
/// text are returned (for `lastError` and its one Warning, docs/drain-contract.md §4a). Other
/// blockers are left as they are.
pub(crate) fn show(
    b: &mut PodBlocker,
    vmi: &str,
    migrations: &Migrations,
    since: Option<jiff::Timestamp>,
) -> Option<(String, String)> {
    if b.reason != super::consts::reason::EVACUATING {
        return None;
    }
    b.virtual_machine_instance = Some(vmi.to_string());
    if let Some(m) = migrations.of(&b.namespace, vmi) {
        b.migration = Some(m.name.clone());
        b.migration_phase = m.phase.clone();
        b.migration_start_time = m.started.clone();
    }
    let failed = migrations.failed(&b.namespace, vmi, since)?;
    let text = format!(
        "live migration {} of VMI {}/{} failed; KubeVirt creates the next one after its back-off",
        failed.name, b.namespace, vmi
    );
    b.reason = super::consts::reason::MIGRATION_FAILED.to_string();
    b.message = Some(match (&b.migration, &b.migration_phase) {
        (Some(next), phase) if *next != failed.name => format!(
            "{text} (next: {next}, {})",
            phase.as_deref().unwrap_or("no phase yet")
        ),
        _ => text.clone(),
    });
    Some((failed.name.clone(), text))
}

/// The controller's watch of KubeVirt's migrations, read by each drain round; inert where
/// KubeVirt is not found.
#[derive(Clone, Default)]
pub(crate) struct MigrationWatch(OptionalWatch);

impl MigrationWatch {
    /// A watch that watches nothing (no KubeVirt).
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Discovers KubeVirt once (`kubevirt.io/v1` serving `virtualmachineinstancemigrations`)
    /// and checks that the operator may list them (one list of one item); then returns the
    /// watch and the future that drives it (until dropped). Not found: an inert watch, logged at
    /// debug; found but not readable: an inert watch and one info line naming the overlay.
    pub(crate) async fn start(
        client: Client,
    ) -> (Self, Option<impl Future<Output = ()> + Send + 'static>) {
        let kind = "VirtualMachineInstanceMigration";
        let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, "virtualmachineinstancemigrations");
        match OptionalWatch::start(client, resource, kind, super::consts::READ_TIMEOUT).await {
            Ok((watch, drive)) => {
                tracing::info!(
                    "KubeVirt found: evacuating launcher pods are shown with their migrations"
                );
                (Self(watch), Some(drive))
            }
            Err(Unavailable::NotServed) => {
                tracing::debug!(
                    "no KubeVirt (kubevirt.io/v1 virtualmachineinstancemigrations) on this cluster; migrations are not shown"
                );
                (Self::none(), None)
            }
            Err(Unavailable::NotReadable(e)) => {
                tracing::info!(error = %e, "KubeVirt found, but its migrations cannot be listed; evacuating pods are shown without them (grant manifests/overlays/kubevirt, chart value kubevirt.enabled)");
                (Self::none(), None)
            }
        }
    }

    /// KubeVirt was found at start and its migrations are watched.
    pub(crate) fn watched(&self) -> bool {
        self.0.watched()
    }

    /// The migrations now (empty until the watch has listed, or without KubeVirt).
    pub(crate) fn read(&self) -> Migrations {
        Migrations::newest(self.0.state().iter().filter_map(|o| {
            let (vmi, m) = Migration::of(o)?;
            Some((o.namespace().unwrap_or_default(), vmi, m))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn migration(name: &str, vmi: &str, created: &str, phase: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                         "labels": {VMI_NAME_LABEL: vmi}},
            "spec": {"vmiName": vmi},
            "status": {"phase": phase, "migrationState": {"startTimestamp": created}}
        }))
        .unwrap()
    }

    #[test]
    fn an_evacuating_launcher_shows_its_vmis_newest_migration() {
        let objs = [
            migration("m-old", "vm-a", "2026-01-01T00:00:00Z", "Failed"),
            migration("m-new", "vm-a", "2026-01-01T00:01:00Z", "Running"),
            migration("m-b", "vm-b", "2026-01-01T00:00:30Z", "Scheduling"),
        ];
        let migrations = Migrations::newest(objs.iter().map(|o| {
            let (vmi, m) = Migration::of(o).unwrap();
            ("ns".to_string(), vmi, m)
        }));
        let pod: DrainPod = serde_json::from_value(json!({"metadata": {
            "name": "virt-launcher-vm-a-x", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                 "name": "vm-a", "uid": "u", "controller": true}]}}))
        .unwrap();
        let vmi = launcher_of(&pod).unwrap();
        let mut b = PodBlocker {
            namespace: "ns".into(),
            name: "virt-launcher-vm-a-x".into(),
            reason: super::super::consts::reason::EVACUATING.into(),
            ..PodBlocker::default()
        };
        assert_eq!(show(&mut b, vmi, &migrations, None), None);
        assert_eq!(
            (
                b.virtual_machine_instance.as_deref(),
                b.migration.as_deref(),
                b.migration_phase.as_deref(),
                b.migration_start_time.as_deref()
            ),
            (
                Some("vm-a"),
                Some("m-new"),
                Some("Running"),
                Some("2026-01-01T00:01:00Z")
            )
        );
        // Not yet migrating (no migration object): the VMI only. Another reason: untouched.
        let mut early = PodBlocker {
            reason: super::super::consts::reason::EVACUATING.into(),
            namespace: "ns".into(),
            ..PodBlocker::default()
        };
        show(&mut early, "vm-c", &migrations, None);
        assert_eq!(early.virtual_machine_instance.as_deref(), Some("vm-c"));
        assert_eq!(early.migration, None);
        let mut pinned = PodBlocker {
            reason: super::super::consts::reason::NOT_MIGRATABLE.into(),
            namespace: "ns".into(),
            ..PodBlocker::default()
        };
        show(&mut pinned, "vm-a", &migrations, None);
        assert_eq!(
            pinned,
            PodBlocker {
                reason: super::super::consts::reason::NOT_MIGRATABLE.into(),
                namespace: "ns".into(),
                ..PodBlocker::default()
            }
        );
        // A pod controlled by something else, or a VirtualMachineInstance of another group,
        // is no launcher.
        let other: DrainPod = serde_json::from_value(json!({"metadata": {
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "VirtualMachineInstance",
                                 "name": "vm-a", "uid": "u", "controller": true}]}}))
        .unwrap();
        assert_eq!(launcher_of(&other), None);
    }

    #[test]
    fn a_failed_migration_holds_its_launcher_until_the_next_one_runs() {
        // Issue 46 item 11: KubeVirt marks the migration Failed and creates the next after its
        // back-off; meanwhile the newest is Pending, which read as healthy progress.
        let of = |objs: &[DynamicObject]| {
            Migrations::newest(objs.iter().map(|o| {
                let (vmi, m) = Migration::of(o).unwrap();
                ("ns".to_string(), vmi, m)
            }))
        };
        let shown = |migrations: &Migrations, since: Option<&str>| {
            let mut b = PodBlocker {
                namespace: "ns".into(),
                name: "virt-launcher-vm-a-x".into(),
                reason: super::super::consts::reason::EVACUATING.into(),
                ..PodBlocker::default()
            };
            let since = since.map(|t| t.parse().unwrap());
            let failure = show(&mut b, "vm-a", migrations, since);
            (b, failure)
        };
        let failed = migration("m1", "vm-a", "2026-01-01T00:01:00Z", "Failed");
        let (b, failure) = shown(&of(std::slice::from_ref(&failed)), None);
        assert_eq!(b.reason, super::super::consts::reason::MIGRATION_FAILED);
        let (name, text) = failure.unwrap();
        assert_eq!(name, "m1");
        assert!(text.contains("live migration m1 of VMI ns/vm-a failed"));
        let backoff = [
            failed.clone(),
            migration("m2", "vm-a", "2026-01-01T00:01:20Z", "Pending"),
        ];
        let (b, failure) = shown(&of(&backoff), Some("2026-01-01T00:00:00Z"));
        assert_eq!(b.reason, super::super::consts::reason::MIGRATION_FAILED);
        assert_eq!(b.migration.as_deref(), Some("m2"), "the next one shown");
        assert!(b.message.unwrap().contains("(next: m2, Pending)"));
        assert_eq!(failure.unwrap().0, "m1", "the failed one named");
        // The next one runs: progress again.
        let running = [
            failed.clone(),
            migration("m2", "vm-a", "2026-01-01T00:01:20Z", "Running"),
        ];
        let (b, failure) = shown(&of(&running), None);
        assert_eq!((b.reason.as_str(), failure), ("Evacuating", None));
        // A failure from before this drain started is not this evacuation's.
        let (b, failure) = shown(&of(&backoff), Some("2026-01-01T00:05:00Z"));
        assert_eq!((b.reason.as_str(), failure), ("Evacuating", None));
    }
}
