//! The test control plane's versions, as `tests/cluster/versions.sh` writes them (the one place
//! they are written; the build scripts source it) and the environment overrides them, and the
//! flags a version needs: Kubernetes 1.37's node-maintenance APIs are alpha, behind feature gates
//! that an older API server refuses as unknown.

/// `versions.sh`, compiled in: `NAME=${NAME:-value}` lines.
const VERSIONS_SH: &str = include_str!("../versions.sh");

/// The gates of Kubernetes 1.37's node-maintenance APIs: the EvictionRequest API (KEP-4563,
/// `lifecycle.k8s.io/v1alpha1`) and the Node lifecycle conditions (KEP-5683).
pub const GATES_1_37: &str = "EvictionRequestAPI=true,NodeLifecycleConditions=true";
/// The alpha group the EvictionRequest gate serves, enabled with `--runtime-config`.
pub const RUNTIME_CONFIG_1_37: &str = "lifecycle.k8s.io/v1alpha1=true";

/// The value of `name` (`KUBE_VERSION`, `ETCD_VERSION`, `KWOK_VERSION`): the environment's when
/// set and not empty, else `versions.sh`'s default. Panics when `versions.sh` lacks it (a broken
/// checkout).
pub fn get(name: &str) -> String {
    if let Ok(v) = std::env::var(name)
        && !v.is_empty()
    {
        return v;
    }
    default_of(VERSIONS_SH, name)
        .unwrap_or_else(|| panic!("tests/cluster/versions.sh has no {name}"))
}

/// The Kubernetes version of the control plane, e.g. `v1.37.2`.
pub fn kube() -> String {
    get("KUBE_VERSION")
}

/// The minor of a `v1.<minor>.<patch>` version; `None` for another shape.
pub fn minor(version: &str) -> Option<u32> {
    version.strip_prefix("v1.")?.split('.').next()?.parse().ok()
}

/// The extra API server flags a version needs: the 1.37 gates and alpha group from 1.37 on.
pub fn apiserver_flags(version: &str) -> Vec<String> {
    if minor(version).is_some_and(|m| m >= 37) {
        vec![
            format!("--feature-gates={GATES_1_37}"),
            format!("--runtime-config={RUNTIME_CONFIG_1_37}"),
        ]
    } else {
        Vec::new()
    }
}

/// The extra kube-controller-manager flags a version needs: the same gates from 1.37 on.
pub fn controller_manager_flags(version: &str) -> Vec<String> {
    if minor(version).is_some_and(|m| m >= 37) {
        vec![format!("--feature-gates={GATES_1_37}")]
    } else {
        Vec::new()
    }
}

fn default_of(sh: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}=${{{name}:-");
    sh.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix)?.strip_suffix('}'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sh_defaults_are_read() {
        assert_eq!(
            default_of(VERSIONS_SH, "KUBE_VERSION")
                .as_deref()
                .and_then(minor),
            Some(37)
        );
        assert!(default_of(VERSIONS_SH, "ETCD_VERSION").is_some());
        assert!(default_of(VERSIONS_SH, "KWOK_VERSION").is_some());
        assert_eq!(default_of(VERSIONS_SH, "NOPE"), None);
    }

    #[test]
    fn the_gates_are_given_from_1_37_only() {
        assert!(apiserver_flags("v1.36.3").is_empty());
        assert!(controller_manager_flags("v1.36.3").is_empty());
        assert_eq!(apiserver_flags("v1.37.2").len(), 2);
        assert_eq!(minor("v1.37.2"), Some(37));
        assert_eq!(minor("1.37"), None);
    }
}
