//! A watch of a resource the cluster may not serve (KubeVirt's migrations, KEP-4563's
//! Evictions): found by discovery at start-up, checked readable with one list of one item, then
//! kept in a reflector store by a watcher on the process's back-off ([`super::relist`]); inert
//! where either check fails, so nothing is watched, asked or logged as an error there. Its
//! readers index [`OptionalWatch::state`] each drain round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::relist::{complete_after, log_error, watch_backoff};

/// Why an [`OptionalWatch`] is inert; each reader logs it in its own words.
pub(crate) enum Unavailable {
    /// Discovery of the resource's group version did not list its plural (or did not answer).
    NotServed,
    /// Served, but the operator may not list it: the list's error, or `timed out`.
    NotReadable(String),
}

/// One watch of all objects of a resource in all namespaces, as [`DynamicObject`]s.
#[derive(Clone, Default)]
pub(crate) struct OptionalWatch {
    store: Option<Store<DynamicObject>>,
    /// The store holds a complete list ([`complete_after`]).
    listed: Arc<AtomicBool>,
}

impl OptionalWatch {
    /// Discovers `resource` (its `api_version` listing its `plural`) and lists one of it, each
    /// within `timeout`; then returns the watch and the future that drives it (until dropped).
    /// `what` names the watch in its error logs. Managed fields and annotations are not kept.
    pub(crate) async fn start(
        client: Client,
        resource: ApiResource,
        what: &'static str,
        timeout: Duration,
    ) -> Result<(Self, impl Future<Output = ()> + Send + 'static), Unavailable> {
        let discovery = client.list_api_group_resources(&resource.api_version);
        match tokio::time::timeout(timeout, discovery).await {
            Ok(Ok(list)) if list.resources.iter().any(|r| r.name == resource.plural) => {}
            _ => return Err(Unavailable::NotServed),
        }
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let one = ListParams::default().limit(1);
        tokio::time::timeout(timeout, api.list_metadata(&one))
            .await
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(Unavailable::NotReadable)?;
        let writer = reflector::store::Writer::<DynamicObject>::new(resource);
        let store = writer.as_reader();
        let listed = Arc::new(AtomicBool::new(false));
        let flag = listed.clone();
        let drive = watcher(api, watcher::Config::default())
            .backoff(watch_backoff())
            .inspect(move |ev| {
                if let Some(complete) = complete_after(ev) {
                    flag.store(complete, Ordering::Relaxed);
                }
            })
            .filter_map(log_error(what))
            .modify(|o| {
                o.metadata.managed_fields = None;
                o.metadata.annotations = None;
            })
            .reflect(writer)
            .for_each(|_| async {});
        let watch = Self {
            store: Some(store),
            listed,
        };
        Ok((watch, drive))
    }

    /// The resource was found and is watched.
    pub(crate) fn watched(&self) -> bool {
        self.store.is_some()
    }

    /// The objects now: empty until the watch has listed, and when inert.
    pub(crate) fn state(&self) -> Vec<Arc<DynamicObject>> {
        match &self.store {
            Some(store) if self.listed.load(Ordering::Relaxed) => store.state(),
            _ => Vec::new(),
        }
    }
}
