//! Credentials and model ids as existing clients send them: API keys
//! (`X-API-Key`, or `Authorization: Bearer <key>` told apart from a JWT by
//! shape), an `api_keys_file` rotated without a restart, anonymous routes
//! opened per dialect, and model ids with `/` and `:` or served by a
//! `prefix/*` pattern, reaching the upstream with the right model id.

use std::{sync::Arc, time::Duration};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::{
    helpers::{AppOptions, TestApp, api_key_entry as entry, assert_detail, assert_error, spawn_replica},
    support::mock_upstream::{MockUpstream, Reply},
};

async fn spawn(tweak: impl FnOnce(&mut AppOptions, &str)) -> TestApp {
    let upstream = Arc::new(MockUpstream::start().await);
    let mut options = AppOptions::default();
    tweak(&mut options, &upstream.base_url());
    spawn_replica(options, upstream).await
}

async fn get_with(app: &TestApp, path: &str, header: (&str, &str)) -> reqwest::Response {
    app.client.get(app.url(path)).header(header.0, header.1).send().await.unwrap()
}

#[tokio::test]
async fn an_api_key_is_accepted_as_x_api_key_and_as_a_bearer_credential_and_names_its_subject() {
    let app =
        spawn(|o, _| o.tenant_toml.push(("acme".into(), format!("api_keys = [{}]", entry("sbk_ui", "ui"))))).await;
    for header in [("x-api-key", "sbk_ui"), ("authorization", "Bearer sbk_ui")] {
        let response = get_with(&app, "/models", header).await;
        assert_eq!(response.status(), StatusCode::OK, "{header:?}");
    }
    // The session is the key's subject's: its token sees it, another subject's does not.
    let created =
        app.client.post(app.url("/v1/sessions")).header("x-api-key", "sbk_ui").json(&json!({"model": "demo"}));
    let id = created.send().await.unwrap().json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let own = app.get(&format!("/v1/sessions/{id}"), Some(&app.token("acme", "ui"))).await;
    assert_eq!(own.status(), StatusCode::OK);
    let other = app.get(&format!("/v1/sessions/{id}"), Some(&app.token("acme", "alice"))).await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND);

    for (header, message) in [
        (("x-api-key", "sbk_wrong"), "unknown API key"),
        (("authorization", "Bearer sbk_wrong"), "unknown API key"),
        (("authorization", "Basic c2JrX3Vp"), "malformed"),
        (("x-api-key", " "), "malformed"),
        (("authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"), "not valid"),
    ] {
        let body =
            assert_error(get_with(&app, "/v1/sessions/x", header).await, StatusCode::UNAUTHORIZED, "unauthorized")
                .await;
        assert!(body["error"]["message"].as_str().unwrap().contains(message), "{header:?}: {body}");
    }
}

#[tokio::test]
async fn a_key_removed_from_the_api_keys_file_stops_working_within_seconds_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acme-keys.toml");
    std::fs::write(&path, format!("api_keys = [{}, {}]", entry("sbk_one", "one"), entry("sbk_two", "two"))).unwrap();
    let file = path.display().to_string();
    let app = spawn(|o, _| o.tenant_toml.push(("acme".into(), format!("api_keys_file = {file:?}")))).await;
    assert_eq!(get_with(&app, "/api/model", ("x-api-key", "sbk_one")).await.status(), StatusCode::OK);
    assert_eq!(get_with(&app, "/api/model", ("x-api-key", "sbk_two")).await.status(), StatusCode::OK);

    // Rotation: `one` out, `three` in; written whole, as a secret mount swaps it.
    let next = dir.path().join("next.toml");
    std::fs::write(&next, format!("api_keys = [{}, {}]", entry("sbk_two", "two"), entry("sbk_three", "three")))
        .unwrap();
    std::fs::rename(&next, &path).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let one = get_with(&app, "/api/model", ("x-api-key", "sbk_one")).await.status();
        let three = get_with(&app, "/api/model", ("x-api-key", "sbk_three")).await.status();
        if one == StatusCode::UNAUTHORIZED && three == StatusCode::OK {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rotation did not take effect within 10 s");
    }
    assert_eq!(get_with(&app, "/api/model", ("x-api-key", "sbk_two")).await.status(), StatusCode::OK);
    let detail =
        assert_detail(get_with(&app, "/api/model", ("x-api-key", "sbk_one")).await, StatusCode::UNAUTHORIZED).await;
    assert_eq!(detail, "unknown API key");
}

#[tokio::test]
async fn anonymous_requests_act_as_the_configured_subject_on_the_opened_dialects_only() {
    let app = spawn(|o, _| {
        o.extra_toml.push_str("\n[anonymous]\ntenant = \"acme\"\nsubject = \"anonymous\"\nroutes = [\"holmes\"]\n");
    })
    .await;
    let answer =
        app.client.post(app.url("/api/chat")).json(&json!({"ask": "hello", "model": "demo"})).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let body: Value = answer.json().await.unwrap();
    let id = body["session_id"].as_str().unwrap();
    let view = app.get(&format!("/v1/sessions/{id}"), Some(&app.token("acme", "anonymous"))).await;
    assert_eq!(view.status(), StatusCode::OK, "the session is the anonymous subject's");
    assert_eq!(app.client.get(app.url("/api/model")).send().await.unwrap().status(), StatusCode::OK);

    // Bad credentials are still refused there; other dialects stay closed.
    let bad = app.client.get(app.url("/api/model")).bearer_auth("not-a-key").send().await.unwrap();
    assert_detail(bad, StatusCode::UNAUTHORIZED).await;
    for path in ["/models", "/v1/sessions/x", "/v1/ai-sdk/chat/x/stream"] {
        assert_eq!(app.get(path, None).await.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn model_ids_with_slashes_and_colons_and_a_pattern_reach_the_upstream_with_their_model_id() {
    let upstream = Arc::new(MockUpstream::start().await);
    let base = upstream.base_url();
    let models = format!(
        r#"
[models."nvidia/nemotron-nano-9b-v2:free"]
provider = "openai"
base_url = "{base}"
model = "nemotron-upstream"

[models."openai/*"]
provider = "openai"
base_url = "{base}"

[models."openai/gpt-4o"]
provider = "openai"
base_url = "{base}"
model = "gpt-4o-2024-08-06"
"#
    );
    let mut options = AppOptions { extra_toml: models, ..AppOptions::default() };
    options.tenant_toml.push(("acme".into(), "default_model = \"openai/gpt-4o-mini\"".into()));
    let app = spawn_replica(options, upstream.clone()).await;
    let token = app.token("acme", "alice");

    let listed: Value = app.get("/api/model", Some(&token)).await.json().await.unwrap();
    let names: Vec<&str> = listed["model_name"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(names.contains(&"openai/*") && names.contains(&"nvidia/nemotron-nano-9b-v2:free"), "{names:?}");
    let gateway: Value = app.get("/models", Some(&token)).await.json().await.unwrap();
    assert_eq!(gateway["defaultModel"], "openai/gpt-4o-mini");

    let cases = [
        (Some("nvidia/nemotron-nano-9b-v2:free"), "nemotron-upstream"),
        (Some("openai/gpt-4o-mini"), "gpt-4o-mini"),
        (Some("openai/gpt-4o"), "gpt-4o-2024-08-06"),
        (None, "gpt-4o-mini"),
    ];
    for (i, (model, upstream_id)) in cases.into_iter().enumerate() {
        upstream.push(Reply::new().text(["ok"]));
        let mut body = json!({"ask": "hi"});
        if let Some(model) = model {
            body["model"] = json!(model);
        }
        let response = app.post_json("/api/chat", Some(&token), &body).await;
        assert_eq!(response.status(), StatusCode::OK, "{model:?}");
        assert_eq!(upstream.requests()[i].body["model"], upstream_id, "{model:?}");
    }
    upstream.push(Reply::new().text(["ok"]));
    let chat = json!({"model": "openai/o3:high", "messages": [{"role": "user", "content": "hi"}]});
    let stream = app.post_json("/chat", Some(&token), &chat).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let _ = stream.text().await.unwrap();
    assert_eq!(upstream.requests()[4].body["model"], "o3:high");

    let unknown = app.post_json("/api/chat", Some(&token), &json!({"ask": "hi", "model": "anthropic/claude"})).await;
    let detail = assert_detail(unknown, StatusCode::BAD_REQUEST).await;
    assert!(detail.contains("openai/*"), "{detail}");
    let bare = app.post_json("/api/chat", Some(&token), &json!({"ask": "hi", "model": "openai/"})).await;
    assert_detail(bare, StatusCode::BAD_REQUEST).await;
    assert_eq!(upstream.calls(), 5);
}

#[tokio::test]
async fn a_request_without_a_model_and_no_default_gets_the_dialects_400() {
    // acme may use `mock` only: the agent's default (`claude`) is not its to use.
    let app = spawn(|o, _| o.tenant_toml.push(("acme".into(), "models = [\"mock\"]".into()))).await;
    assert_eq!(app.config.default_model("acme"), None);
    assert_eq!(app.config.default_model("globex"), Some("demo"), "globex has its own");
    let token = app.token("acme", "alice");
    let holmes = app.post_json("/api/chat", Some(&token), &json!({"ask": "hi"})).await;
    assert!(assert_detail(holmes, StatusCode::BAD_REQUEST).await.contains("default_model"));
    let gateway = app.post_json("/chat", Some(&token), &json!({"messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(gateway.status(), StatusCode::BAD_REQUEST);
    assert!(gateway.json::<Value>().await.unwrap()["error"].as_str().unwrap().contains("default_model"));
    let listed: Value = app.get("/models", Some(&token)).await.json().await.unwrap();
    assert_eq!(listed, json!({"models": ["mock"]}));
    assert_eq!(app.upstream.calls(), 0);
}
