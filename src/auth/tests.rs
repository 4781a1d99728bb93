use std::sync::atomic::AtomicUsize;

use jsonwebtoken::{Algorithm, EncodingKey, jwk::Jwk};
use serde_json::{Value, json};

use super::*;

const RSA_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/keys/rsa_a_private.pem");
const RSA_PUBLIC: &str = include_str!("../../tests/fixtures/keys/rsa_a_public.pem");
const EC_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/keys/ec_p256_private.pem");
const ED_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/keys/ed25519_private.pem");

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/keys/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn config() -> Config {
    let text = format!(
        r#"
[[tenants]]
id = "a"
jwt = {{ hs256_secret = "tenant-a-secret-0123456789" }}
[[tenants]]
id = "b"
jwt = {{ hs256_secret = "tenant-b-secret-0123456789" }}
[[tenants]]
id = "multi"
jwt = {{ keys = [
  {{ kid = "hs", alg = "HS256", secret = "multi-hs-secret-0123456789" }},
  {{ kid = "rs", alg = "RS256", public_key_file = "{rsa}" }},
  {{ kid = "es", alg = "ES256", public_key_file = "{ec}" }},
  {{ alg = "EdDSA", public_key_file = "{ed}" }},
] }}
[[tenants]]
id = "rsa-only"
jwt = {{ keys = [{{ kid = "rs", alg = "RS256", public_key_file = "{rsa}" }}] }}
[models.demo]
provider = "demo"
"#,
        rsa = fixture("rsa_a_public.pem"),
        ec = fixture("ec_p256_public.pem"),
        ed = fixture("ed25519_public.pem"),
    );
    Config::from_toml(&text, &|_| None).unwrap()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn claims(tenant: &str) -> Value {
    json!({"sub": "alice", "tenant": tenant, "exp": now() + 600})
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

#[tokio::test]
async fn a_minted_token_verifies_and_names_its_principal() {
    let config = config();
    let auth = Authenticator::from_config(&config);
    let token = mint_token(&config.tenants["a"], "alice", Duration::from_secs(60), &["sessions:admin".into()]).unwrap();
    let principal = auth.verify(&token).await.unwrap();
    assert_eq!(&*principal.tenant, "a");
    assert_eq!(principal.subject, "alice");
    assert!(principal.has_scope("sessions:admin"));
}

#[tokio::test]
async fn a_token_signed_by_another_tenant_claiming_this_one_is_refused() {
    let config = config();
    let auth = Authenticator::from_config(&config);
    let mut forged = config.tenants["b"].clone();
    forged.id = "a".into(); // tenant b's key, tenant a's claim
    let token = mint_token(&forged, "mallory", Duration::from_secs(60), &[]).unwrap();
    assert_eq!(auth.verify(&token).await, Err(AuthError::Invalid));
}

#[tokio::test]
async fn an_unsigned_token_is_malformed() {
    let auth = Authenticator::from_config(&config());
    // {"alg":"none","typ":"JWT"} . {"sub":"x","tenant":"a","exp":9999999999} .
    let token = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ4IiwidGVuYW50IjoiYSIsImV4cCI6OTk5OTk5OTk5OX0.";
    assert_eq!(auth.verify(token).await, Err(AuthError::Malformed));
}

#[tokio::test]
async fn each_key_type_verifies_with_and_without_a_kid() {
    let auth = Authenticator::from_config(&config());
    let hs = EncodingKey::from_secret(b"multi-hs-secret-0123456789");
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let es = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let ed = EncodingKey::from_ed_pem(ED_PRIVATE).unwrap();
    let claims = claims("multi");
    for (alg, kid, key) in [
        (Algorithm::HS256, Some("hs"), &hs),
        (Algorithm::RS256, Some("rs"), &rs),
        (Algorithm::ES256, Some("es"), &es),
        (Algorithm::EdDSA, None, &ed),
        (Algorithm::RS256, None, &rs),
    ] {
        let token = sign(alg, kid, key, &claims);
        assert_eq!(auth.verify(&token).await.map(|p| p.subject), Ok("alice".to_string()), "{alg:?} {kid:?}");
    }
}

#[tokio::test]
async fn a_kid_restricts_the_candidates_to_that_key() {
    let auth = Authenticator::from_config(&config());
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let claims = claims("multi");
    // Right key, but the token names another key (or no key of the tenant).
    assert_eq!(auth.verify(&sign(Algorithm::RS256, Some("es"), &rs, &claims)).await, Err(AuthError::Invalid));
    assert_eq!(auth.verify(&sign(Algorithm::RS256, Some("nope"), &rs, &claims)).await, Err(AuthError::Invalid));
    // The EdDSA key has no kid, so a token naming a kid never reaches it.
    let ed = EncodingKey::from_ed_pem(ED_PRIVATE).unwrap();
    assert_eq!(auth.verify(&sign(Algorithm::EdDSA, Some("ed"), &ed, &claims)).await, Err(AuthError::Invalid));
}

#[tokio::test]
async fn an_hmac_over_a_public_key_is_never_accepted() {
    let auth = Authenticator::from_config(&config());
    let confused = EncodingKey::from_secret(RSA_PUBLIC.as_bytes());
    for tenant in ["rsa-only", "multi"] {
        for kid in [Some("rs"), None] {
            let token = sign(Algorithm::HS256, kid, &confused, &claims(tenant));
            assert_eq!(auth.verify(&token).await, Err(AuthError::Invalid), "{tenant} {kid:?}");
        }
    }
}

#[tokio::test]
async fn an_expired_token_signed_by_a_public_key_says_so() {
    let auth = Authenticator::from_config(&config());
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let expired = json!({"sub": "alice", "tenant": "multi", "exp": now() - 3600});
    assert_eq!(auth.verify(&sign(Algorithm::RS256, Some("rs"), &rs, &expired)).await, Err(AuthError::Expired));
    let early = json!({"sub": "alice", "tenant": "multi", "exp": now() + 7200, "nbf": now() + 3600});
    assert_eq!(auth.verify(&sign(Algorithm::RS256, None, &rs, &early)).await, Err(AuthError::NotYetValid));
}

#[test]
fn minting_uses_the_first_hmac_key_and_its_kid() {
    let config = config();
    let token = mint_token(&config.tenants["multi"], "alice", Duration::from_secs(60), &[]).unwrap();
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!((header.alg, header.kid.as_deref()), (Algorithm::HS256, Some("hs")));
}

#[test]
fn minting_for_a_tenant_without_an_hmac_key_is_an_error() {
    let config = config();
    let error = mint_token(&config.tenants["rsa-only"], "alice", Duration::from_secs(60), &[]).unwrap_err();
    assert!(matches!(error, MintError::NoSigningKey(_)));
    assert!(error.to_string().contains("\"rsa-only\" has no HMAC key"), "{error}");
}

fn rules() -> ClaimRules {
    ClaimRules::from_config(&config().tenants["a"].jwt)
}

fn jwk_of(key: &EncodingKey, alg: Algorithm, kid: &str, keep_alg: bool) -> Value {
    let mut jwk = serde_json::to_value(Jwk::from_encoding_key(key, alg).unwrap()).unwrap();
    jwk["kid"] = json!(kid);
    if !keep_alg {
        jwk.as_object_mut().unwrap().remove("alg");
    }
    jwk
}

#[test]
fn jwks_keys_take_their_algorithm_from_alg_or_from_kty_and_crv() {
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let es = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let ed = EncodingKey::from_ed_pem(ED_PRIVATE).unwrap();
    let document = json!({"keys": [
        jwk_of(&rs, Algorithm::PS256, "rsa-pss", true),
        jwk_of(&rs, Algorithm::RS256, "rsa", false),
        jwk_of(&es, Algorithm::ES256, "ec", false),
        jwk_of(&ed, Algorithm::EdDSA, "ed", false),
    ]});
    let keys = jwks::parse_jwks(document.to_string().as_bytes(), &rules()).unwrap();
    let header = |alg, kid: &str| {
        let mut h = Header::new(alg);
        h.kid = Some(kid.to_string());
        h
    };
    let found: Vec<(Option<&str>, bool)> = keys
        .iter()
        .zip([
            (Algorithm::PS256, "rsa-pss"),
            (Algorithm::RS256, "rsa"),
            (Algorithm::ES256, "ec"),
            (Algorithm::EdDSA, "ed"),
        ])
        .map(|(k, (alg, kid))| (k.kid(), k.matches(&header(alg, kid))))
        .collect();
    assert_eq!(found, vec![(Some("rsa-pss"), true), (Some("rsa"), true), (Some("ec"), true), (Some("ed"), true)]);
    assert!(!keys[1].matches(&header(Algorithm::HS256, "rsa")), "an RSA key never serves an HS256 token");
}

#[test]
fn jwks_symmetric_encryption_and_mismatched_keys_are_ignored() {
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let es = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let mut encryption = jwk_of(&rs, Algorithm::RS256, "enc", true);
    encryption["use"] = json!("enc");
    let mut mismatched = jwk_of(&es, Algorithm::ES256, "ec-as-384", false);
    mismatched["alg"] = json!("ES384");
    let document = json!({"keys": [
        {"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ", "kid": "oct", "alg": "HS256"},
        encryption,
        mismatched,
        {"kty": "RSA", "kid": "rsa-as-es", "alg": "ES256", "n": "AQAB", "e": "AQAB"},
        {"kty": "OKP", "crv": "X25519", "kid": "x", "x": "AAAA"},
        {"kty": "EC", "crv": "P-256", "kid": "short", "x": "AAAA", "y": "AAAA"},
        {"kty": "RSA", "kid": "none", "alg": "none", "n": "AQAB", "e": "AQAB"},
        "not even an object",
    ]});
    assert!(jwks::parse_jwks(document.to_string().as_bytes(), &rules()).unwrap().is_empty());
    assert!(jwks::parse_jwks(b"<html>", &rules()).is_err());
}

/// A JWKS endpoint that counts its requests; `None` answers 500.
struct JwksServer {
    url: String,
    hits: Arc<AtomicUsize>,
    document: Arc<std::sync::Mutex<Option<Value>>>,
}

impl JwksServer {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

async fn serve_jwks(document: Value) -> JwksServer {
    let hits = Arc::new(AtomicUsize::new(0));
    let document = Arc::new(std::sync::Mutex::new(Some(document)));
    let (counter, current) = (hits.clone(), document.clone());
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = current.lock().unwrap().clone();
            async move { body.map(axum::Json).ok_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    JwksServer { url, hits, document }
}

fn jwks_config(url: &str, refresh_secs: u64) -> Config {
    let text = format!(
        r#"
[[tenants]]
id = "j"
jwt = {{ jwks_url = "{url}", jwks_refresh_secs = {refresh_secs} }}
[models.demo]
provider = "demo"
"#
    );
    Config::from_toml(&text, &|_| None).unwrap()
}

#[tokio::test]
async fn unknown_kids_refetch_the_jwks_at_most_once_per_ten_seconds() {
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let server = serve_jwks(json!({"keys": [jwk_of(&rs, Algorithm::RS256, "a", true)]})).await;
    let auth = Authenticator::from_config(&jwks_config(&server.url, 3600));
    let claims = claims("j");
    // No refresher started: the first token loads the set (the initial load).
    assert!(auth.verify(&sign(Algorithm::RS256, Some("a"), &rs, &claims)).await.is_ok());
    assert_eq!(server.hits(), 1);
    for kid in ["x", "y", "z"] {
        assert_eq!(auth.verify(&sign(Algorithm::RS256, Some(kid), &rs, &claims)).await, Err(AuthError::Invalid));
    }
    assert_eq!(server.hits(), 2, "one on-demand fetch for x; y and z do not reach the endpoint");
    // A known kid never triggers a fetch.
    assert!(auth.verify(&sign(Algorithm::RS256, Some("a"), &rs, &claims)).await.is_ok());
    assert_eq!(server.hits(), 2);
}

#[tokio::test]
async fn the_refresher_loads_keys_before_the_first_token_and_stops_at_shutdown() {
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let server = serve_jwks(json!({"keys": [jwk_of(&rs, Algorithm::RS256, "a", true)]})).await;
    let auth = Authenticator::from_config(&jwks_config(&server.url, 1));
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    auth.start_refresh(&tasks, shutdown.clone());
    auth.start_refresh(&tasks, shutdown.clone()); // a second call does nothing
    assert_eq!(tasks.len(), 1);
    // Waits for the refresher's first fetch rather than fetching itself.
    assert!(auth.verify(&sign(Algorithm::RS256, Some("a"), &rs, &claims("j"))).await.is_ok());
    assert_eq!(server.hits(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.hits() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the set is refreshed every second");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    tasks.close();
    tokio::time::timeout(Duration::from_secs(2), tasks.wait()).await.expect("the refresher stops at shutdown");
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_last_good_set() {
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let server = serve_jwks(json!({"keys": [jwk_of(&rs, Algorithm::RS256, "a", true)]})).await;
    let auth = Authenticator::from_config(&jwks_config(&server.url, 1));
    let (tasks, shutdown) = (TaskTracker::new(), CancellationToken::new());
    auth.start_refresh(&tasks, shutdown.clone());
    let token = sign(Algorithm::RS256, Some("a"), &rs, &claims("j"));
    assert!(auth.verify(&token).await.is_ok());
    *server.document.lock().unwrap() = None;
    let failing_since = server.hits();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.hits() < failing_since + 2 {
        assert!(tokio::time::Instant::now() < deadline, "the refresher keeps trying");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(auth.verify(&token).await.is_ok(), "the last good set is still in use");
    shutdown.cancel();
}

#[tokio::test]
async fn an_unreachable_jwks_leaves_the_tenant_without_keys_not_open() {
    let auth = Authenticator::from_config(&jwks_config("http://127.0.0.1:1/jwks.json", 3600));
    let rs = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let token = sign(Algorithm::RS256, Some("a"), &rs, &claims("j"));
    assert_eq!(auth.verify(&token).await, Err(AuthError::Invalid));
}

#[test]
fn configured_keys_never_show_in_debug_output() {
    let config = config();
    let debug = format!("{config:?}");
    assert!(!debug.contains("multi-hs-secret"), "{debug}");
    assert!(!debug.contains("MIIB"), "{debug}");
}
