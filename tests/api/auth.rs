use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{GLOBEX_SECRET, assert_error, spawn_app};

#[tokio::test]
async fn a_valid_token_lists_the_tenants_models() {
    let app = spawn_app().await;
    let response = app.get_holmes_models(Some(&app.token("acme", "alice"))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"model_name": ["claude", "demo", "mock"]}));
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_models_in_both_dialects() {
    let app = spawn_app().await;
    let token = app.token("globex", "bob");
    let holmes: Value = app.get_holmes_models(Some(&token)).await.json().await.unwrap();
    assert_eq!(holmes, json!({"model_name": ["demo"]}));
    let gateway: Value = app.get("/models", Some(&token)).await.json().await.unwrap();
    assert_eq!(gateway, json!({"models": ["demo"], "defaultModel": "demo"}));
}

/// Each bad credential gets 401 with the JSON body, and nothing reaches the
/// model upstream.
#[tokio::test]
async fn bad_credentials_get_401_and_never_reach_the_upstream() {
    let app = spawn_app().await;
    // Expired an hour ago: well past the 30 s leeway.
    let expired = sign_hs256(crate::helpers::ACME_SECRET, &json!({"sub": "a", "tenant": "acme", "exp": now() - 3600}));
    // Signed with globex's secret but claiming tenant acme.
    let foreign = sign_hs256(GLOBEX_SECRET, &json!({"sub": "mallory", "tenant": "acme", "exp": far_future()}));
    let wrong_secret =
        sign_hs256("some-other-secret-0123456789", &json!({"sub": "x", "tenant": "acme", "exp": far_future()}));
    let unsigned = unsigned_token(&json!({"sub": "x", "tenant": "acme", "exp": far_future()}));
    let no_tenant = sign_hs256(crate::helpers::ACME_SECRET, &json!({"sub": "x", "exp": far_future()}));
    let cases: Vec<(&str, Option<String>)> = vec![
        ("no token", None),
        ("malformed", Some("not.a.jwt".to_string())),
        ("another secret", Some(wrong_secret)),
        ("expired", Some(expired)),
        ("alg none", Some(unsigned)),
        ("another tenant's key", Some(foreign)),
        ("no tenant claim", Some(no_tenant)),
    ];
    for (name, token) in &cases {
        for path in ["/api/model", "/models"] {
            let response = app.get(path, token.as_deref()).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name} on {path}");
        }
        let response = app.get("/api/model", token.as_deref()).await;
        let body = assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
        assert!(!body.to_string().contains("secret"), "{name}: {body}");
        let chat = app.post_json("/api/chat", token.as_deref(), &json!({"ask": "hi", "model": "mock"})).await;
        assert_eq!(chat.status(), StatusCode::UNAUTHORIZED, "{name} on /api/chat");
    }
    assert_eq!(app.upstream.calls(), 0, "no request reached the model");
}

#[tokio::test]
async fn an_expired_token_is_told_so() {
    let app = spawn_app().await;
    let token = sign_hs256(crate::helpers::ACME_SECRET, &json!({"sub": "a", "tenant": "acme", "exp": now() - 3600}));
    let body = assert_error(app.get("/api/model", Some(&token)).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(body["error"]["message"], "token has expired");
}

#[tokio::test]
async fn llm_gateway_routes_answer_errors_in_their_own_shape() {
    let app = spawn_app().await;
    let response = app.get("/models", None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": "missing credentials: send Authorization: Bearer <token or API key>, or X-API-Key: <key>"})
    );
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn far_future() -> u64 {
    now() + 3600
}

fn sign_hs256(secret: &str, claims: &Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), claims, &key).unwrap()
}

fn unsigned_token(claims: &Value) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", b64.encode(claims.to_string()))
}
