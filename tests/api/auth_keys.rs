//! Several keys per tenant (HS256, RS256, ES256, EdDSA) with `kid`s, the
//! claim checks, keys from a JWKS URL that rotate without a restart, and the
//! configuration errors of `jwt`. The key pairs are test-only fixtures
//! (tests/fixtures/keys/README.md).

use std::{
    io::Write,
    process::Command,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::config::{Config, JwtKeyMaterial};

use crate::helpers::{AppOptions, TestApp, assert_error, spawn_app_with};

const ISSUER: &str = "https://auth.example.com";
const AUDIENCE: &str = "switchboard";
const KEYRING_SECRET: &str = "keyring-hs-secret-0123456789";

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/keys/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn pem(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("the fixture exists")
}

fn rsa_a() -> EncodingKey {
    EncodingKey::from_rsa_pem(&pem("rsa_a_private.pem")).unwrap()
}

fn rsa_b() -> EncodingKey {
    EncodingKey::from_rsa_pem(&pem("rsa_b_private.pem")).unwrap()
}

fn ec() -> EncodingKey {
    EncodingKey::from_ec_pem(&pem("ec_p256_private.pem")).unwrap()
}

fn ed() -> EncodingKey {
    EncodingKey::from_ed_pem(&pem("ed25519_private.pem")).unwrap()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// Claims tenant `keyring` accepts; `changes` overrides (or, with null, removes) fields.
fn keyring_claims(changes: Value) -> Value {
    let mut claims = json!({"sub": "alice", "tenant": "keyring", "exp": now() + 600, "iss": ISSUER, "aud": AUDIENCE});
    for (field, value) in changes.as_object().unwrap() {
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(field),
            v => claims.as_object_mut().unwrap().insert(field.clone(), v.clone()),
        };
    }
    claims
}

/// `keyring`: one key of each type, issuer, audience, 5 s leeway.
/// `rsa-only`: an RS256 key and nothing else.
fn keyring_toml() -> String {
    format!(
        r#"
[[tenants]]
id = "keyring"
jwt = {{ issuer = "{ISSUER}", audience = "{AUDIENCE}", leeway_secs = 5, keys = [
  {{ kid = "hs", alg = "HS256", secret = "{KEYRING_SECRET}" }},
  {{ kid = "rs", alg = "RS256", public_key_file = "{rsa}" }},
  {{ kid = "es", alg = "ES256", public_key_file = "{ec}" }},
  {{ kid = "ed", alg = "EdDSA", public_key_file = "{ed}" }},
] }}

[[tenants]]
id = "rsa-only"
jwt = {{ keys = [{{ kid = "rs", alg = "RS256", public_key_file = "{rsa_b}" }}] }}
"#,
        rsa = fixture("rsa_a_public.pem"),
        ec = fixture("ec_p256_public.pem"),
        ed = fixture("ed25519_public.pem"),
        rsa_b = fixture("rsa_b_public.pem"),
    )
}

async fn spawn_with(extra_toml: String) -> TestApp {
    spawn_app_with(AppOptions { redis_url: None, extra_toml, ..AppOptions::default() }).await
}

#[tokio::test]
async fn each_configured_key_type_verifies_its_own_tokens() {
    let app = spawn_with(keyring_toml()).await;
    let claims = keyring_claims(json!({}));
    let hs = EncodingKey::from_secret(KEYRING_SECRET.as_bytes());
    let cases = [
        ("HS256", sign(Algorithm::HS256, Some("hs"), &hs, &claims)),
        ("RS256", sign(Algorithm::RS256, Some("rs"), &rsa_a(), &claims)),
        ("ES256", sign(Algorithm::ES256, Some("es"), &ec(), &claims)),
        ("EdDSA", sign(Algorithm::EdDSA, Some("ed"), &ed(), &claims)),
        ("RS256 without a kid", sign(Algorithm::RS256, None, &rsa_a(), &claims)),
        (
            "nbf within the leeway",
            sign(Algorithm::ES256, Some("es"), &ec(), &keyring_claims(json!({"nbf": now() + 2}))),
        ),
        (
            "the rsa-only tenant",
            sign(
                Algorithm::RS256,
                Some("rs"),
                &rsa_b(),
                &json!({"sub": "bob", "tenant": "rsa-only", "exp": now() + 600}),
            ),
        ),
    ];
    for (name, token) in &cases {
        let response = app.get_holmes_models(Some(token)).await;
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        let body: Value = response.json().await.unwrap();
        assert!(body["model_name"].as_array().is_some_and(|m| !m.is_empty()), "{name}: {body}");
    }
}

/// Every token here is refused with 401 and the JSON error body.
#[tokio::test]
async fn tokens_with_the_wrong_algorithm_key_claims_or_tenant_are_refused() {
    let app = spawn_with(keyring_toml()).await;
    let rsa_public_as_secret = EncodingKey::from_secret(&pem("rsa_b_public.pem"));
    let rsa_only_claims = json!({"sub": "mallory", "tenant": "rsa-only", "exp": now() + 600});
    let unsigned = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(br#"{"alg":"none","typ":"JWT","kid":"rs"}"#);
        format!("{header}.{}.", b64.encode(keyring_claims(json!({})).to_string()))
    };
    let cases: Vec<(&str, String)> = vec![
        ("alg none", unsigned),
        (
            "HS256 signed with the RS256 tenant's public key as the secret",
            sign(Algorithm::HS256, Some("rs"), &rsa_public_as_secret, &rsa_only_claims),
        ),
        ("the same, without a kid", sign(Algorithm::HS256, None, &rsa_public_as_secret, &rsa_only_claims)),
        ("a kid the tenant does not have", sign(Algorithm::RS256, Some("nope"), &rsa_a(), &keyring_claims(json!({})))),
        ("the kid of another key", sign(Algorithm::RS256, Some("es"), &rsa_a(), &keyring_claims(json!({})))),
        ("the right kid with another algorithm", sign(Algorithm::ES256, Some("rs"), &ec(), &keyring_claims(json!({})))),
        (
            "a wrong issuer",
            sign(Algorithm::RS256, Some("rs"), &rsa_a(), &keyring_claims(json!({"iss": "https://evil.example.com"}))),
        ),
        ("no issuer", sign(Algorithm::RS256, Some("rs"), &rsa_a(), &keyring_claims(json!({"iss": null})))),
        (
            "a wrong audience",
            sign(Algorithm::ES256, Some("es"), &ec(), &keyring_claims(json!({"aud": "someone-else"}))),
        ),
        ("no audience", sign(Algorithm::ES256, Some("es"), &ec(), &keyring_claims(json!({"aud": null})))),
        (
            "expired beyond the leeway",
            sign(Algorithm::EdDSA, Some("ed"), &ed(), &keyring_claims(json!({"exp": now() - 60}))),
        ),
        (
            "not valid before a time beyond the leeway",
            sign(Algorithm::EdDSA, Some("ed"), &ed(), &keyring_claims(json!({"nbf": now() + 600}))),
        ),
        ("no subject", sign(Algorithm::RS256, Some("rs"), &rsa_a(), &keyring_claims(json!({"sub": null})))),
        (
            "tenant rsa-only's key presenting tenant keyring's claim",
            sign(Algorithm::RS256, Some("rs"), &rsa_b(), &keyring_claims(json!({}))),
        ),
        (
            "tenant keyring's key presenting tenant rsa-only's claim",
            sign(Algorithm::RS256, Some("rs"), &rsa_a(), &rsa_only_claims),
        ),
    ];
    for (name, token) in &cases {
        let response = app.get_holmes_models(Some(token)).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name}");
        let body = assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
        assert!(!body.to_string().contains("BEGIN"), "{name}: {body}");
    }
}

#[tokio::test]
async fn time_errors_say_what_is_wrong() {
    let app = spawn_with(keyring_toml()).await;
    let expired = sign(Algorithm::RS256, Some("rs"), &rsa_a(), &keyring_claims(json!({"exp": now() - 60})));
    let body =
        assert_error(app.get_holmes_models(Some(&expired)).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(body["error"]["message"], "token has expired");
    let early = sign(Algorithm::RS256, Some("rs"), &rsa_a(), &keyring_claims(json!({"nbf": now() + 600})));
    let body = assert_error(app.get_holmes_models(Some(&early)).await, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(body["error"]["message"], "token is not valid yet");
}

#[tokio::test]
async fn minted_tokens_carry_the_kid_and_claims_of_the_tenants_hmac_key() {
    let app = spawn_with(keyring_toml()).await;
    let token = app.token("keyring", "carol");
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!((header.alg, header.kid.as_deref()), (Algorithm::HS256, Some("hs")));
    assert_eq!(app.get_holmes_models(Some(&token)).await.status(), StatusCode::OK);
    let error = switchboard::auth::mint_token(&app.config.tenants["rsa-only"], "x", Duration::from_secs(60), &[])
        .expect_err("no HMAC key to sign with");
    assert!(error.to_string().contains("\"rsa-only\" has no HMAC key"), "{error}");
}

#[test]
fn the_token_command_explains_that_a_public_key_tenant_cannot_be_minted_for() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let text = format!(
        "[[tenants]]\nid = \"idp\"\njwt = {{ keys = [{{ alg = \"RS256\", public_key_file = \"{}\" }}] }}\n[models.demo]\nprovider = \"demo\"\n",
        fixture("rsa_a_public.pem")
    );
    file.write_all(text.as_bytes()).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .env_remove("SWITCHBOARD_CONFIG")
        .args(["token", "--tenant", "idp", "--subject", "x", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("has no HMAC key"), "{stderr}");
    assert!(output.stdout.is_empty());
}

/// A JWKS endpoint on 127.0.0.1:0 whose document can be swapped, counting requests.
struct JwksServer {
    url: String,
    document: Arc<Mutex<Value>>,
    hits: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(document: Value) -> Self {
        let document = Arc::new(Mutex::new(document));
        let hits = Arc::new(AtomicUsize::new(0));
        let (current, counter) = (document.clone(), hits.clone());
        let router = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                let body = current.lock().unwrap().clone();
                async move { axum::Json(body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, document, hits }
    }

    fn serve(&self, document: Value) {
        *self.document.lock().unwrap() = document;
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A JWKS document of `(kid, algorithm, key)`; `alg` is left out for EC and
/// OKP keys, so their `kty`/`crv` decide.
fn jwks(keys: &[(&str, Algorithm, &EncodingKey)]) -> Value {
    let keys: Vec<Value> = keys
        .iter()
        .map(|(kid, alg, key)| {
            let mut jwk = serde_json::to_value(Jwk::from_encoding_key(key, *alg).unwrap()).unwrap();
            jwk["kid"] = json!(kid);
            jwk["use"] = json!("sig");
            if *alg != Algorithm::RS256 {
                jwk.as_object_mut().unwrap().remove("alg");
            }
            jwk
        })
        .collect();
    json!({ "keys": keys })
}

fn idp_toml(url: &str, refresh_secs: u64) -> String {
    format!(
        "[[tenants]]\nid = \"idp\"\njwt = {{ issuer = \"{ISSUER}\", jwks_url = \"{url}\", jwks_refresh_secs = {refresh_secs} }}\n"
    )
}

fn idp_token(alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
    sign(alg, Some(kid), key, &json!({"sub": "dave", "tenant": "idp", "exp": now() + 600, "iss": ISSUER}))
}

async fn status_of(app: &TestApp, token: &str) -> StatusCode {
    app.get_holmes_models(Some(token)).await.status()
}

/// Asks until `token` gets `expected`, up to a deadline.
async fn eventually(app: &TestApp, token: &str, expected: StatusCode, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status = status_of(app, token).await;
        if status == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {status} after {within:?}, expected {expected}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Needs the background refresher (`Authenticator::start_refresh`) running in the app.
#[tokio::test]
async fn a_rotated_jwks_key_verifies_at_once_and_a_removed_one_fails_after_the_background_refresh() {
    let server = JwksServer::start(jwks(&[("a", Algorithm::RS256, &rsa_a())])).await;
    let app = spawn_with(idp_toml(&server.url, 1)).await;
    let token_a = idp_token(Algorithm::RS256, "a", &rsa_a());
    assert_eq!(status_of(&app, &token_a).await, StatusCode::OK);

    // Rotation, no restart: keys b and c are published next to a, and b is used at once.
    server.serve(jwks(&[
        ("a", Algorithm::RS256, &rsa_a()),
        ("b", Algorithm::ES256, &ec()),
        ("c", Algorithm::EdDSA, &ed()),
    ]));
    let token_b = idp_token(Algorithm::ES256, "b", &ec());
    assert_eq!(status_of(&app, &token_b).await, StatusCode::OK, "the unknown kid b is fetched on demand");
    assert_eq!(status_of(&app, &idp_token(Algorithm::EdDSA, "c", &ed())).await, StatusCode::OK);

    // Key a is withdrawn. Its kid is still known, so no request triggers a
    // fetch: only the background refresh (every second) can drop it.
    server.serve(jwks(&[("b", Algorithm::ES256, &ec())]));
    eventually(&app, &token_a, StatusCode::UNAUTHORIZED, Duration::from_secs(10)).await;
    assert_eq!(status_of(&app, &token_b).await, StatusCode::OK);
}

#[tokio::test]
async fn unknown_kids_fetch_the_jwks_on_demand_at_most_once_per_ten_seconds() {
    let server = JwksServer::start(jwks(&[("a", Algorithm::RS256, &rsa_a())])).await;
    // A refresh interval far longer than the test: only on-demand fetches happen.
    let app = spawn_with(idp_toml(&server.url, 3600)).await;
    assert_eq!(status_of(&app, &idp_token(Algorithm::RS256, "a", &rsa_a())).await, StatusCode::OK);
    let initial = server.hits();

    server.serve(jwks(&[("a", Algorithm::RS256, &rsa_a()), ("b", Algorithm::ES256, &ec())]));
    assert_eq!(status_of(&app, &idp_token(Algorithm::ES256, "b", &ec())).await, StatusCode::OK);
    assert_eq!(server.hits(), initial + 1, "one fetch for the unknown kid");

    for kid in ["x", "y", "z"] {
        let token = idp_token(Algorithm::RS256, kid, &rsa_a());
        let response = app.get_holmes_models(Some(&token)).await;
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    assert_eq!(server.hits(), initial + 1, "made-up kids within 10 s do not reach the JWKS endpoint");
}

#[tokio::test]
async fn hmac_keys_published_in_a_jwks_are_ignored() {
    use base64::Engine as _;
    let secret = "jwks-published-secret-0123456789";
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let server = JwksServer::start(json!({"keys": [
        {"kty": "oct", "kid": "h", "alg": "HS256", "k": k},
        serde_json::to_value(Jwk::from_encoding_key(&rsa_a(), Algorithm::RS256).unwrap()).unwrap(),
    ]}))
    .await;
    let app = spawn_with(idp_toml(&server.url, 3600)).await;
    let token = idp_token(Algorithm::HS256, "h", &EncodingKey::from_secret(secret.as_bytes()));
    assert_eq!(status_of(&app, &token).await, StatusCode::UNAUTHORIZED);
}

// Configuration.

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn with_tenant_jwt(jwt: &str) -> String {
    format!("[[tenants]]\nid = \"t\"\njwt = {jwt}\n[models.demo]\nprovider = \"demo\"\n")
}

/// The (path, message) of every error, in order.
fn errors_of(jwt: &str, env: &[(&str, &str)]) -> Vec<(String, String)> {
    let errors = Config::from_toml(&with_tenant_jwt(jwt), &env_of(env)).expect_err("the configuration is refused");
    errors.0.into_iter().map(|e| (e.path, e.message)).collect()
}

fn assert_one_error(jwt: &str, env: &[(&str, &str)], path: &str, message_part: &str) {
    let errors = errors_of(jwt, env);
    assert_eq!(errors.len(), 1, "{jwt}: {errors:?}");
    assert_eq!(errors[0].0, path, "{jwt}: {errors:?}");
    assert!(errors[0].1.contains(message_part), "{jwt}: {:?} lacks {message_part:?}", errors[0].1);
}

/// [`assert_one_error`] for the one key `key` of `jwt.keys`, at its `field`.
fn assert_key_error(key: &str, env: &[(&str, &str)], field: &str, message_part: &str) {
    assert_one_error(&format!("{{ keys = [{key}] }}"), env, &format!("tenants[0].jwt.keys[0].{field}"), message_part);
}

#[test]
fn a_configuration_with_every_kind_of_key_validates() {
    let env = env_of(&[
        ("HS_SECRET", "a-secret-from-the-environment"),
        ("EC_PEM", &String::from_utf8(pem("ec_p256_public.pem")).unwrap()),
    ]);
    let jwt = format!(
        r#"{{ hs256_secret = "the-shorthand-secret-0123", issuer = "{ISSUER}", audience = "{AUDIENCE}", leeway_secs = 10, keys = [
  {{ kid = "k1", alg = "HS512", secret_env = "HS_SECRET" }},
  {{ kid = "k2", alg = "RS256", public_key_file = "{rsa}" }},
  {{ kid = "k3", alg = "ES256", public_key_env = "EC_PEM" }},
  {{ kid = "k4", alg = "EdDSA", public_key_file = "{ed}" }},
  {{ kid = "k5", alg = "PS384", public_key_file = "{rsa}" }},
], jwks_url = "https://auth.example.com/.well-known/jwks.json", jwks_refresh_secs = 60 }}"#,
        rsa = fixture("rsa_a_public.pem"),
        ed = fixture("ed25519_public.pem"),
    );
    let config = Config::from_toml(&with_tenant_jwt(&jwt), &env).expect("valid");
    let jwt = &config.tenants["t"].jwt;
    let keys: Vec<(Option<&str>, Algorithm, bool)> = jwt
        .keys
        .iter()
        .map(|k| (k.kid.as_deref(), k.algorithm, matches!(k.material, JwtKeyMaterial::Secret(_))))
        .collect();
    assert_eq!(
        keys,
        vec![
            (None, Algorithm::HS256, true),
            (Some("k1"), Algorithm::HS512, true),
            (Some("k2"), Algorithm::RS256, false),
            (Some("k3"), Algorithm::ES256, false),
            (Some("k4"), Algorithm::EdDSA, false),
            (Some("k5"), Algorithm::PS384, false),
        ]
    );
    assert_eq!(jwt.hs256_secret().unwrap().expose(), "the-shorthand-secret-0123");
    let jwks = jwt.jwks.as_ref().unwrap();
    assert_eq!(
        (jwks.url.as_str(), jwks.refresh),
        ("https://auth.example.com/.well-known/jwks.json", Duration::from_secs(60))
    );
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("the-shorthand-secret") && !debug.contains("a-secret-from") && !debug.contains("MFkw"),
        "{debug}"
    );
}

#[test]
fn a_jwks_url_alone_is_enough_and_refreshes_every_five_minutes_by_default() {
    let config =
        Config::from_toml(&with_tenant_jwt(r#"{ jwks_url = "http://127.0.0.1:9/jwks.json" }"#), &env_of(&[])).unwrap();
    let jwt = &config.tenants["t"].jwt;
    assert!(jwt.keys.is_empty());
    assert_eq!(jwt.jwks.as_ref().unwrap().refresh, Duration::from_secs(300));
}

#[test]
fn a_tenant_with_no_key_at_all_is_refused() {
    assert_one_error(r#"{ issuer = "https://auth.example.com" }"#, &[], "tenants[0].jwt", "a key is required");
    assert_one_error(r#"{ keys = [] }"#, &[], "tenants[0].jwt", "a key is required");
}

#[test]
fn bad_algorithms_are_refused_with_their_path() {
    let secret = r#"secret = "0123456789abcdef0123""#;
    assert_key_error(&format!(r#"{{ alg = "none", {secret} }}"#), &[], "alg", "not one of");
    assert_one_error(
        &format!(r#"{{ keys = [{{ alg = "HS999", {secret} }}] }}"#),
        &[],
        "tenants[0].jwt.keys[0].alg",
        "\"HS999\"",
    );
    assert_key_error(&format!(r#"{{ kid = "x", {secret} }}"#), &[], "alg", "required");
}

#[test]
fn hmac_secrets_shorter_than_16_bytes_are_refused_with_their_path() {
    assert_key_error(r#"{ alg = "HS256", secret = "short" }"#, &[], "secret", "16 bytes");
    assert_key_error(r#"{ alg = "HS384", secret_env = "S" }"#, &[("S", "short")], "secret_env", "16 bytes");
    assert_key_error(r#"{ alg = "HS256", secret_env = "UNSET" }"#, &[], "secret_env", "UNSET is not set");
    // The shorthand keeps its path.
    assert_one_error(r#"{ hs256_secret = "short" }"#, &[], "tenants[0].jwt", "16 bytes");
}

#[test]
fn keys_with_the_wrong_kind_of_material_are_refused() {
    let rsa = fixture("rsa_a_public.pem");
    assert_one_error(
        &format!(r#"{{ keys = [{{ alg = "HS256", public_key_file = "{rsa}" }}] }}"#),
        &[],
        "tenants[0].jwt.keys[0]",
        "HMAC algorithm",
    );
    assert_one_error(
        r#"{ keys = [{ alg = "RS256", secret = "0123456789abcdef0123" }] }"#,
        &[],
        "tenants[0].jwt.keys[0]",
        "public-key algorithm",
    );
    assert_one_error(
        r#"{ keys = [{ alg = "ES256" }] }"#,
        &[],
        "tenants[0].jwt.keys[0]",
        "public_key_file or public_key_env",
    );
    assert_one_error(
        &format!(r#"{{ keys = [{{ alg = "RS256", public_key_file = "{rsa}", public_key_env = "P" }}] }}"#),
        &[("P", "x")],
        "tenants[0].jwt.keys[0]",
        "not both",
    );
}

#[test]
fn unreadable_and_unparsable_public_keys_are_refused_with_their_path() {
    assert_key_error(
        r#"{ alg = "RS256", public_key_file = "/nonexistent/acme.pem" }"#,
        &[],
        "public_key_file",
        "cannot read /nonexistent/acme.pem",
    );
    let mut garbage = tempfile::NamedTempFile::new().unwrap();
    garbage.write_all(b"-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n").unwrap();
    let garbage = garbage.path().display().to_string();
    for (alg, kind) in [("RS256", "RSA"), ("ES256", "P-256"), ("EdDSA", "Ed25519")] {
        assert_key_error(
            &format!(r#"{{ alg = "{alg}", public_key_file = "{garbage}" }}"#),
            &[],
            "public_key_file",
            kind,
        );
    }
    // A key of another type than the algorithm.
    let ec = fixture("ec_p256_public.pem");
    let ed = fixture("ed25519_public.pem");
    let rsa = fixture("rsa_a_public.pem");
    for (alg, file) in [("RS256", &ec), ("ES256", &rsa), ("ES384", &ec), ("EdDSA", &ec), ("ES256", &ed)] {
        assert_key_error(
            &format!(r#"{{ alg = "{alg}", public_key_file = "{file}" }}"#),
            &[],
            "public_key_file",
            "public key in PEM",
        );
    }
    // A private key where the public one belongs.
    assert_key_error(
        &format!(r#"{{ alg = "RS256", public_key_file = "{}" }}"#, fixture("rsa_a_private.pem")),
        &[],
        "public_key_file",
        "private key",
    );
    assert_key_error(
        r#"{ alg = "EdDSA", public_key_env = "ED_PEM" }"#,
        &[("ED_PEM", "not pem at all")],
        "public_key_env",
        "Ed25519",
    );
    assert_key_error(r#"{ alg = "EdDSA", public_key_env = "ED_PEM" }"#, &[], "public_key_env", "ED_PEM is not set");
}

#[test]
fn duplicate_and_empty_kids_are_refused() {
    let jwt = format!(
        r#"{{ keys = [
  {{ kid = "k1", alg = "HS256", secret = "0123456789abcdef0123" }},
  {{ kid = "k1", alg = "RS256", public_key_file = "{}" }},
] }}"#,
        fixture("rsa_a_public.pem")
    );
    assert_one_error(&jwt, &[], "tenants[0].jwt.keys[1].kid", "duplicate kid \"k1\"");
    assert_key_error(r#"{ kid = "", alg = "HS256", secret = "0123456789abcdef0123" }"#, &[], "kid", "empty");
}

#[test]
fn bad_jwks_settings_are_refused_with_their_path() {
    for url in ["not a url", "ftp://auth.example.com/jwks.json", "file:///etc/jwks.json"] {
        assert_one_error(
            &format!(r#"{{ jwks_url = "{url}" }}"#),
            &[],
            "tenants[0].jwt.jwks_url",
            "http:// or https://",
        );
    }
    assert_one_error(
        r#"{ jwks_url = "https://auth.example.com/jwks.json", jwks_refresh_secs = 0 }"#,
        &[],
        "tenants[0].jwt.jwks_refresh_secs",
        "positive",
    );
    assert_one_error(
        r#"{ hs256_secret = "0123456789abcdef0123", jwks_refresh_secs = 60 }"#,
        &[],
        "tenants[0].jwt.jwks_refresh_secs",
        "jwks_url",
    );
}

#[test]
fn every_key_mistake_is_reported_at_once() {
    let jwt = r#"{ jwks_url = "nope", keys = [
  { kid = "a", alg = "RS999", secret = "x" },
  { kid = "b", alg = "HS256", secret = "short" },
  { kid = "c", alg = "ES256", public_key_file = "/nonexistent.pem" },
  { kid = "c", alg = "HS256", secret = "0123456789abcdef0123", colour = "blue" },
] }"#;
    let paths: Vec<String> = errors_of(jwt, &[]).into_iter().map(|(path, _)| path).collect();
    assert_eq!(
        paths,
        vec![
            "tenants.0.jwt.?.keys.3.colour",
            "tenants[0].jwt.keys[0].alg",
            "tenants[0].jwt.keys[1].secret",
            "tenants[0].jwt.keys[2].public_key_file",
            "tenants[0].jwt.keys[3].kid",
            "tenants[0].jwt.jwks_url",
        ]
    );
}
