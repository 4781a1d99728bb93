//! Per-tenant provider credentials: a tenant that brings its own key (from a
//! secret file or an environment variable) has its model calls signed with
//! it; other tenants use the model's key; the key is never stored.

use std::{io::Write as _, sync::Arc};

use crate::{
    helpers::{AppOptions, spawn_replica, store_snapshot},
    sse::SseReader,
    support::mock_upstream::{MockUpstream, Reply},
};

#[tokio::test]
async fn a_tenant_with_its_own_key_calls_the_model_with_it_and_the_key_is_never_stored() {
    let upstream = Arc::new(MockUpstream::start().await);
    let mut tenant_key = tempfile::NamedTempFile::new().unwrap();
    writeln!(tenant_key, "sk-initech-own-key-4242").unwrap();
    let mut shared_key = tempfile::NamedTempFile::new().unwrap();
    writeln!(shared_key, "sk-shared-model-key-1717").unwrap();
    let extra = format!(
        r#"
[models.keyed]
provider = "openai"
base_url = "{upstream}"
model = "keyed-model"
api_key_file = "{shared}"

[[tenants]]
id = "initech"
jwt = {{ hs256_secret = "initech-test-secret-0123456789" }}
models = ["keyed"]

[tenants.credentials.keyed]
api_key_file = "{own}"
"#,
        upstream = upstream.base_url(),
        shared = shared_key.path().display(),
        own = tenant_key.path().display(),
    );
    let app = spawn_replica(AppOptions { extra_toml: extra, ..AppOptions::default() }, upstream).await;

    for (tenant, subject) in [("initech", "ivan"), ("acme", "alice")] {
        app.upstream.push(Reply::new().text(["hello"]).usage(5, 1));
        let token = app.token(tenant, subject);
        let id = app.create_session(&token, "keyed").await;
        let frames = SseReader::new(app.send_message(&token, &id, "hi").await).rest().await;
        assert_eq!(frames.last().unwrap().event, "turn_ended", "{tenant}");
    }
    let requests = app.upstream.requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-initech-own-key-4242"));
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-shared-model-key-1717"));

    for (key, value) in store_snapshot(&app).await {
        let text = String::from_utf8_lossy(&value);
        assert!(!text.contains("sk-initech") && !text.contains("sk-shared"), "{key} holds a provider key");
    }
}
