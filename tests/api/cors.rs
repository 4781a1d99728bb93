//! CORS and the session console over HTTP: preflights answered before
//! authentication, the headers an allowed origin gets (and may read), none
//! for a refused origin (counted), the per-tenant origin rule, the
//! credentials rule of the configuration, the embedded defaults' local
//! origins, and the console's route on and off. The same in a real browser
//! behind nginx: `tests/browser/`.

use reqwest::{Method, Response, StatusCode};
use serde_json::json;
use switchboard::{app::Application, config::Config};

use crate::{
    helpers::{AppOptions, TestApp, assert_error, spawn_app, spawn_app_with},
    metrics::{sample, scrape},
};

const APP: &str = "https://app.example.com";
const ACME_PAGE: &str = "https://acme.example";
const GLOBEX_PAGE: &str = "https://globex.example";

/// An app with `[server.cors]` for [`APP`], the console on, a rate for
/// acme (so answers carry `RateLimit` headers) and an origin of each
/// tenant's own.
async fn cors_app() -> TestApp {
    spawn_app_with(AppOptions {
        server_toml: format!("console = true\n\n[server.cors]\nallowed_origins = [\"{APP}\"]\nmax_age_secs = 300\n"),
        tenant_toml: vec![
            ("acme".into(), format!("rate_limit = {{ requests_per_second = 100 }}\ncors_origins = [\"{ACME_PAGE}\"]")),
            ("globex".into(), format!("cors_origins = [\"{GLOBEX_PAGE}\"]")),
        ],
        ..AppOptions::default()
    })
    .await
}

async fn preflight(app: &TestApp, path: &str, origin: &str, method: &str, headers: &str) -> Response {
    let mut request = app
        .client
        .request(Method::OPTIONS, app.url(path))
        .header("origin", origin)
        .header("access-control-request-method", method);
    if !headers.is_empty() {
        request = request.header("access-control-request-headers", headers);
    }
    request.send().await.unwrap()
}

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response.headers().get(name).map(|v| v.to_str().unwrap()).unwrap_or_default()
}

/// The comma-separated names of a list header, lowercased.
fn names(response: &Response, name: &str) -> Vec<String> {
    header(response, name).split(',').map(|n| n.trim().to_ascii_lowercase()).filter(|n| !n.is_empty()).collect()
}

fn cors_headers(response: &Response) -> Vec<String> {
    let names = response.headers().keys().map(|k| k.as_str().to_string());
    names.filter(|k| k.starts_with("access-control-")).collect()
}

#[tokio::test]
async fn an_allowed_origins_preflight_is_answered_before_authentication() {
    let app = cors_app().await;
    let asked = "authorization,content-type,last-event-id,x-api-key,x-ai-sdk-version,traceparent";
    for path in ["/v1/sessions", "/v1/sessions/some-id/events", "/v1/ai-sdk/chat", "/api/chat"] {
        let response = preflight(&app, path, APP, "POST", asked).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}: a preflight is never a 401");
        assert_eq!(header(&response, "access-control-allow-origin"), APP);
        let allowed = names(&response, "access-control-allow-headers");
        for name in asked.split(',') {
            assert!(allowed.contains(&name.to_string()), "{path}: {name} not in {allowed:?}");
        }
        let methods = names(&response, "access-control-allow-methods");
        assert!(["get", "post", "delete"].iter().all(|m| methods.contains(&m.to_string())), "{methods:?}");
        assert_eq!(header(&response, "access-control-max-age"), "300");
        assert!(header(&response, "vary").contains("origin"));
    }
}

#[tokio::test]
async fn an_allowed_origin_reads_the_exposed_headers_of_the_actual_request() {
    let app = cors_app().await;
    let token = app.token("acme", "alice");
    let response = app
        .client
        .post(app.url("/v1/sessions"))
        .header("origin", APP)
        .bearer_auth(&token)
        .json(&json!({"model": "mock"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(header(&response, "access-control-allow-origin"), APP);
    let exposed = names(&response, "access-control-expose-headers");
    for name in [
        "x-vercel-ai-ui-message-stream",
        "retry-after",
        "ratelimit",
        "ratelimit-policy",
        "x-request-id",
        "server-timing",
        "x-session-id",
    ] {
        assert!(exposed.contains(&name.to_string()), "{name} not exposed: {exposed:?}");
    }
    for name in ["ratelimit", "ratelimit-policy", "x-request-id", "server-timing"] {
        assert!(response.headers().contains_key(name), "the answer has {name}");
    }
    assert!(response.headers().get("access-control-allow-credentials").is_none(), "credentials are opt-in");

    // An error answer carries the headers too: a page can read its 401.
    let refused = app.client.get(app.url("/v1/sessions")).header("origin", APP).send().await.unwrap();
    assert_eq!(header(&refused, "access-control-allow-origin"), APP);
    assert_error(refused, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

#[tokio::test]
async fn a_refused_origin_gets_no_cors_headers_and_is_counted() {
    let app = cors_app().await;
    let evil = "https://evil.example";
    let response = preflight(&app, "/v1/sessions", evil, "POST", "authorization,content-type").await;
    assert_eq!(cors_headers(&response), Vec::<String>::new(), "no CORS headers for {evil}");
    let token = app.token("acme", "alice");
    // The server answers a simple request (the browser keeps the answer
    // from the page), with no CORS headers.
    let response = app.client.get(app.url("/v1/sessions")).header("origin", evil).bearer_auth(&token).send().await;
    let response = response.unwrap();
    assert_eq!(cors_headers(&response), Vec::<String>::new());
    // Lookalikes of an allowed origin are other origins.
    for lookalike in ["https://app.example.com.evil.example", "http://app.example.com", "https://app.example.com:8443"]
    {
        let response = preflight(&app, "/v1/sessions", lookalike, "GET", "").await;
        assert!(response.headers().get("access-control-allow-origin").is_none(), "{lookalike}");
    }
    // Without an Origin (curl, a server), nothing of CORS either.
    let plain = app.client.get(app.url("/v1/sessions")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(cors_headers(&plain), Vec::<String>::new());

    let metrics = scrape(&app).await;
    assert_eq!(sample(&metrics, "switchboard_cors_refused_total", &[("kind", "preflight")]), 4.0);
    assert_eq!(sample(&metrics, "switchboard_cors_refused_total", &[("kind", "request")]), 1.0);
}

#[tokio::test]
async fn an_origin_only_another_tenant_lists_cannot_use_this_tenants_credentials() {
    let app = cors_app().await;
    // The preflight cannot know the tenant: every tenant's origins pass it.
    for origin in [ACME_PAGE, GLOBEX_PAGE] {
        let response = preflight(&app, "/v1/sessions", origin, "GET", "authorization").await;
        assert_eq!(header(&response, "access-control-allow-origin"), origin);
    }
    let list = |origin: &'static str, token: String| {
        app.client.get(app.url("/v1/sessions")).header("origin", origin).bearer_auth(token).send()
    };
    let own = list(GLOBEX_PAGE, app.token("globex", "gina")).await.unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    let shared = list(APP, app.token("globex", "gina")).await.unwrap();
    assert_eq!(shared.status(), StatusCode::OK, "server.cors origins hold for every tenant");
    let foreign = list(GLOBEX_PAGE, app.token("acme", "alice")).await.unwrap();
    assert_eq!(header(&foreign, "access-control-allow-origin"), GLOBEX_PAGE, "the page can read why");
    assert_error(foreign, StatusCode::FORBIDDEN, "forbidden").await;
    let metrics = scrape(&app).await;
    assert_eq!(sample(&metrics, "switchboard_cors_refused_total", &[("kind", "tenant")]), 1.0);
}

#[test]
fn a_wildcard_origin_with_credentials_is_refused_by_the_configuration() {
    let config = |cors: &str| {
        let text = format!(
            "[server.cors]\n{cors}\n\n[[tenants]]\nid = \"t\"\njwt = {{ hs256_secret = \"0123456789abcdef\" }}\n\
             cors_origins = [\"https://t.example\"]\n\n[models.demo]\nprovider = \"demo\"\n"
        );
        Config::from_toml(&text, &|_| None)
    };
    let errors = config("allowed_origins = [\"*\"]\nallow_credentials = true").unwrap_err().to_string();
    assert!(
        errors.contains("server.cors.allow_credentials: cannot be true with allowed_origins = [\"*\"]"),
        "{errors}"
    );
    let errors = config("allowed_origins = [\"*\", \"https://a.example\"]").unwrap_err().to_string();
    assert!(errors.contains("server.cors.allowed_origins"), "{errors}");
    let errors = config("allowed_origins = [\"https://a.example/\", \"https://*.example\"]").unwrap_err().to_string();
    assert!(errors.contains("allowed_origins[0]") && errors.contains("allowed_origins[1]"), "every mistake: {errors}");
    let any = config("allowed_origins = [\"*\"]").expect("a wildcard without credentials is fine");
    assert!(any.warnings().iter().any(|w| w.contains("CORS allows every origin")), "{:?}", any.warnings());
    assert!(config("allowed_origins = [\"https://a.example\"]\nallow_credentials = true").is_ok());
    let text = "[[tenants]]\nid = \"t\"\njwt = { hs256_secret = \"0123456789abcdef\" }\ncors_origins = [\"*\"]\n\n\
                [models.demo]\nprovider = \"demo\"\n";
    let errors = Config::from_toml(text, &|_| None).unwrap_err().to_string();
    assert!(errors.contains("tenants[0].cors_origins"), "a tenant cannot allow every origin: {errors}");
}

#[tokio::test]
async fn a_wildcard_answers_any_origin_and_credentials_answer_only_listed_ones() {
    let any = spawn_app_with(AppOptions {
        server_toml: "\n[server.cors]\nallowed_origins = [\"*\"]\n".into(),
        ..AppOptions::default()
    })
    .await;
    let response = preflight(&any, "/v1/sessions", "https://anyone.example", "POST", "authorization").await;
    assert_eq!(header(&response, "access-control-allow-origin"), "*");
    assert!(response.headers().get("access-control-allow-credentials").is_none());

    let with_cookies = spawn_app_with(AppOptions {
        server_toml: format!("\n[server.cors]\nallowed_origins = [\"{APP}\"]\nallow_credentials = true\n"),
        ..AppOptions::default()
    })
    .await;
    let response = preflight(&with_cookies, "/v1/sessions", APP, "POST", "authorization").await;
    assert_eq!(header(&response, "access-control-allow-origin"), APP);
    assert_eq!(header(&response, "access-control-allow-credentials"), "true");
    let refused = preflight(&with_cookies, "/v1/sessions", "https://evil.example", "POST", "").await;
    assert_eq!(cors_headers(&refused), Vec::<String>::new());
}

#[tokio::test]
async fn cors_is_off_unless_configured() {
    let app = spawn_app().await;
    let token = app.token("acme", "alice");
    let response = app.client.get(app.url("/v1/sessions")).header("origin", APP).bearer_auth(&token).send().await;
    let response = response.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(cors_headers(&response), Vec::<String>::new());
    // Without the layer a preflight is an unauthenticated request like any other.
    let response = preflight(&app, "/v1/sessions", APP, "POST", "authorization").await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

/// The embedded defaults (`cargo run`), on a port of the test's own.
async fn embedded_defaults_app() -> (String, tokio_util::sync::CancellationToken) {
    let env = |name: &str| (name == "SWITCHBOARD_LISTEN").then(|| "127.0.0.1:0".to_string());
    let config = Config::embedded_defaults(&env).expect("the embedded defaults are valid");
    let app = Application::build(config).await.expect("the app starts");
    let url = format!("http://{}", app.local_addr());
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until_stopped(async move { stopped.cancelled().await }));
    (url, stop)
}

#[tokio::test]
async fn the_embedded_defaults_allow_local_pages_on_any_port_and_serve_the_console() {
    let (url, stop) = embedded_defaults_app().await;
    let client = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        client
            .request(Method::OPTIONS, format!("{url}/v1/sessions"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type")
            .send()
    };
    for origin in ["http://localhost:5173", "http://127.0.0.1:3000", "http://localhost"] {
        let response = preflight(origin).await.unwrap();
        assert_eq!(header(&response, "access-control-allow-origin"), origin);
    }
    for origin in ["https://localhost:5173", "http://localhost.evil.example:5173", "http://192.168.1.2:3000"] {
        let response = preflight(origin).await.unwrap();
        assert!(response.headers().get("access-control-allow-origin").is_none(), "{origin}");
    }
    let console = client.get(format!("{url}/console")).send().await.unwrap();
    assert_eq!(console.status(), StatusCode::OK);
    stop.cancel();
}

#[tokio::test]
async fn the_console_is_a_public_page_when_on() {
    let app = cors_app().await;
    let page = app.get("/console", None).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(header(&page, "content-type").starts_with("text/html"));
    let csp = header(&page, "content-security-policy").to_string();
    assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let html = page.text().await.unwrap();
    assert!(html.contains("/console/console.js") && !html.contains("<script>"), "scripts are files, never inline");
    for (path, kind) in [
        ("/console/console.js", "text/javascript"),
        ("/console/client.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let asset = app.get(path, None).await;
        assert_eq!(asset.status(), StatusCode::OK, "{path}");
        assert!(header(&asset, "content-type").starts_with(kind), "{path}");
        assert_eq!(header(&asset, "x-content-type-options"), "nosniff");
    }
    // The page holds no data: everything it shows comes through the API,
    // with the credential the user pastes.
    let script = app.get("/console/console.js", None).await.text().await.unwrap();
    assert!(!script.contains("innerHTML") && !script.contains("insertAdjacentHTML"), "text only, never markup");
    assert_error(app.get("/v1/sessions", None).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

#[tokio::test]
async fn the_console_is_not_served_when_off() {
    let app = spawn_app().await;
    assert_error(app.get("/console", None).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let token = app.token("acme", "alice");
    assert_error(app.get("/console", Some(&token)).await, StatusCode::NOT_FOUND, "not_found").await;
    assert_error(app.get("/console/client.js", Some(&token)).await, StatusCode::NOT_FOUND, "not_found").await;
}
