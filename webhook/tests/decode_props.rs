//! Property tests of the envelope: arbitrary bytes and mutated valid reviews never panic and always
//! get 200 (with the uid echoed) or a 4xx.

mod support;

use std::sync::Arc;

use axum::body::Body;
use k8s_openapi::api::core::v1::ConfigMap;
use proptest::prelude::*;
use serde_json::Value;
use support::*;
use tower::ServiceExt;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `body` through the admission router (no TLS) and checks the status class; returns the
/// status and body.
fn call(rt: &tokio::runtime::Runtime, body: Vec<u8>) -> (u16, Vec<u8>) {
    let router = nmo_webhook::admission_route(PATH, Arc::new(TestValidator));
    rt.block_on(async move {
        let req = http::Request::post(PATH)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let resp = router.oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, bytes.to_vec())
    })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        Just(Value::String(String::new())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer in `v` (excluding the root).
fn pointers(v: &Value, prefix: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{prefix}/{i}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        _ => {}
    }
}

fn remove_at(root: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let last = last.replace("~1", "/").replace("~0", "~");
    match root.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.remove(&last);
        }
        Some(Value::Array(a)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a.remove(i);
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(prop::sample::Index, Value),
    Remove(prop::sample::Index),
    Truncate(prop::sample::Index),
    FlipByte(prop::sample::Index, u8),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), arb_json()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        any::<prop::sample::Index>().prop_map(Mutation::Remove),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipByte(i, b)),
    ]
}

fn apply(mutations: &[Mutation]) -> Vec<u8> {
    let mut v = review_value("prop-uid", "ok");
    let mut bytes_mutations = Vec::new();
    for m in mutations {
        let mut ptrs = Vec::new();
        pointers(&v, String::new(), &mut ptrs);
        match m {
            Mutation::Replace(i, new) if !ptrs.is_empty() => {
                if let Some(slot) = v.pointer_mut(&ptrs[i.index(ptrs.len())]) {
                    *slot = new.clone();
                }
            }
            Mutation::Remove(i) if !ptrs.is_empty() => {
                remove_at(&mut v, &ptrs[i.index(ptrs.len())])
            }
            Mutation::Truncate(_) | Mutation::FlipByte(..) => bytes_mutations.push(m.clone()),
            _ => {}
        }
    }
    let mut bytes = serde_json::to_vec(&v).unwrap();
    for m in bytes_mutations {
        match m {
            Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len() + 1)),
            Mutation::FlipByte(i, b) if !bytes.is_empty() => {
                let at = i.index(bytes.len());
                bytes[at] ^= b;
            }
            _ => {}
        }
    }
    bytes
}

fn check(status: u16, body: &[u8], expect_uid: Option<&str>) -> Result<(), TestCaseError> {
    prop_assert!(
        status == 200 || (400..500).contains(&status),
        "status {status}: {}",
        String::from_utf8_lossy(body)
    );
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        TestCaseError::fail(format!(
            "non-JSON response {e}: {}",
            String::from_utf8_lossy(body)
        ))
    })?;
    if status == 200 {
        prop_assert_eq!(&v["kind"], "AdmissionReview");
        if let Some(uid) = expect_uid {
            prop_assert_eq!(&v["response"]["uid"], uid);
        }
        prop_assert!(!v["response"]["uid"].as_str().unwrap_or_default().is_empty());
    } else {
        prop_assert!(!v["message"].as_str().unwrap_or_default().is_empty(), "{v}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = nmo_webhook::decode_review::<ConfigMap>(&body);
        let rt = runtime();
        let (status, resp) = call(&rt, body);
        check(status, &resp, None)?;
        prop_assert_ne!(status, 200, "random bytes are never a valid review");
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        let body = serde_json::to_vec(&v).unwrap();
        let rt = runtime();
        let (status, resp) = call(&rt, body);
        check(status, &resp, None)?;
    }

    #[test]
    fn mutated_valid_reviews_get_200_or_4xx(mutations in prop::collection::vec(arb_mutation(), 1..4)) {
        let body = apply(&mutations);
        let decoded = nmo_webhook::decode_review::<ConfigMap>(&body);
        let rt = runtime();
        let (status, resp) = call(&rt, body);
        check(status, &resp, None)?;
        // The pure decoder and the route agree on acceptance.
        prop_assert_eq!(decoded.is_ok(), status == 200);
        if let Ok(req) = decoded {
            let v: Value = serde_json::from_slice(&resp).unwrap();
            prop_assert_eq!(v["response"]["uid"].as_str(), Some(req.uid.as_str()));
        }
    }
}

#[test]
fn the_unmutated_review_is_accepted() {
    let rt = runtime();
    let (status, resp) = call(&rt, review("prop-uid", "ok"));
    assert_eq!(status, 200);
    check(status, &resp, Some("prop-uid")).unwrap();
}
