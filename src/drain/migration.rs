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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::api::{DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::pod::DrainPod;
use crate::api::PodBlocker;

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

/// Each VMI's newest migration, by `(namespace, vmi)`; empty when KubeVirt is not watched.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Migrations(HashMap<(String, String), Migration>);

impl Migrations {
    /// The newest of `migrations` (`(namespace, vmi, migration)`) per VMI: the latest
    /// creation, then the greatest name (two created in one second).
    pub(crate) fn newest(
        migrations: impl IntoIterator<Item = (String, String, Migration)>,
    ) -> Self {
        let mut by_vmi: HashMap<(String, String), Migration> = HashMap::new();
        for (namespace, vmi, m) in migrations {
            let key = (namespace, vmi);
            let newer = by_vmi
                .get(&key)
                .is_none_or(|old| (m.created, &m.name) > (old.created, &old.name));
            if newer {
                by_vmi.insert(key, m);
            }
        }
        Self(by_vmi)
    }

    /// The newest migration of VMI `vmi` in `namespace`.
    pub(crate) fn of(&self, namespace: &str, vmi: &str) -> Option<&Migration> {
        self.0.get(&(namespace.to_string(), vmi.to_string()))
    }
}

/// The VMI a pod is the launcher of: its controller is a `kubevirt.io` VirtualMachineInstance.
pub(crate) fn launcher_of(pod: &DrainPod) -> Option<&str> {
    pod.controller_ref()
        .filter(|o| {
            o.kind == "VirtualMachineInstance" && super::api_group(&o.api_version) == "kubevirt.io"
        })
        .map(|o| o.name.as_str())
}

/// Puts into the `Evacuating` blocker `b` of the launcher pod of VMI `vmi` the VMI's name and,
/// when one is known, its newest migration: name, phase and start time. Other blockers are left
/// as they are.
pub(crate) fn show(b: &mut PodBlocker, vmi: &str, migrations: &Migrations) {
    if b.reason != super::reason::EVACUATING {
        return;
    }
    b.virtual_machine_instance = Some(vmi.to_string());
    if let Some(m) = migrations.of(&b.namespace, vmi) {
        b.migration = Some(m.name.clone());
        b.migration_phase = m.phase.clone();
        b.migration_start_time = m.started.clone();
    }
}

fn api_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceMigration",
    ))
}

/// The controller's watch of KubeVirt's migrations, read by each drain round; inert where
/// KubeVirt is not found.
#[derive(Clone)]
pub(crate) struct MigrationWatch {
    store: Option<Store<DynamicObject>>,
    listed: Arc<AtomicBool>,
}

impl MigrationWatch {
    /// A watch that watches nothing (no KubeVirt).
    pub(crate) fn none() -> Self {
        Self {
            store: None,
            listed: Arc::default(),
        }
    }

    /// Discovers KubeVirt once (`kubevirt.io/v1` serving `virtualmachineinstancemigrations`)
    /// and checks that the operator may list them (one list of one item); then returns the
    /// watch and the future that drives it (until dropped). Not found: an inert watch, logged at
    /// debug; found but not readable: an inert watch and one info line naming the overlay.
    pub(crate) async fn start(
        client: Client,
    ) -> (Self, Option<impl Future<Output = ()> + Send + 'static>) {
        let discovery = client.list_api_group_resources(KUBEVIRT_GROUP_VERSION);
        let served = match tokio::time::timeout(super::act::READ_TIMEOUT, discovery).await {
            Ok(Ok(list)) => list
                .resources
                .iter()
                .any(|r| r.name == "virtualmachineinstancemigrations"),
            _ => false,
        };
        if !served {
            tracing::debug!(
                "no KubeVirt (kubevirt.io/v1 virtualmachineinstancemigrations) on this cluster; migrations are not shown"
            );
            return (Self::none(), None);
        }
        let resource = api_resource();
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let one = ListParams::default().limit(1);
        let readable =
            tokio::time::timeout(super::act::READ_TIMEOUT, api.list_metadata(&one)).await;
        if let Err(e) = readable
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::info!(error = %e, "KubeVirt found, but its migrations cannot be listed; evacuating pods are shown without them (grant manifests/overlays/kubevirt, chart value kubevirt.enabled)");
            return (Self::none(), None);
        }
        let writer = reflector::store::Writer::<DynamicObject>::new(resource);
        let store = writer.as_reader();
        let listed = Arc::new(AtomicBool::new(false));
        let flag = listed.clone();
        let drive = watcher(api, watcher::Config::default())
            .backoff(crate::watch::relist::watch_backoff())
            .inspect(move |ev| {
                if let Some(complete) = crate::watch::relist::complete_after(ev) {
                    flag.store(complete, Ordering::Relaxed);
                }
            })
            .filter_map(crate::watch::relist::log_error(
                "VirtualMachineInstanceMigration",
            ))
            .modify(|m| {
                m.metadata.managed_fields = None;
                m.metadata.annotations = None;
            })
            .reflect(writer)
            .for_each(|_| async {});
        tracing::info!("KubeVirt found: evacuating launcher pods are shown with their migrations");
        (
            Self {
                store: Some(store),
                listed,
            },
            Some(drive),
        )
    }

    /// The migrations now (empty until the watch has listed, or without KubeVirt).
    /// KubeVirt was found at start and its migrations are watched.
    pub(crate) fn watched(&self) -> bool {
        self.store.is_some()
    }

    pub(crate) fn read(&self) -> Migrations {
        let Some(store) = self
            .store
            .as_ref()
            .filter(|_| self.listed.load(Ordering::Relaxed))
        else {
            return Migrations::default();
        };
        Migrations::newest(store.state().iter().filter_map(|o| {
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
            reason: super::super::reason::EVACUATING.into(),
            ..PodBlocker::default()
        };
        show(&mut b, vmi, &migrations);
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
            reason: super::super::reason::EVACUATING.into(),
            namespace: "ns".into(),
            ..PodBlocker::default()
        };
        show(&mut early, "vm-c", &migrations);
        assert_eq!(early.virtual_machine_instance.as_deref(), Some("vm-c"));
        assert_eq!(early.migration, None);
        let mut pinned = PodBlocker {
            reason: super::super::reason::NOT_MIGRATABLE.into(),
            namespace: "ns".into(),
            ..PodBlocker::default()
        };
        show(&mut pinned, "vm-a", &migrations);
        assert_eq!(
            pinned,
            PodBlocker {
                reason: super::super::reason::NOT_MIGRATABLE.into(),
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
}
