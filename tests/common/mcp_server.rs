//! Real MCP servers for the tests, each a process on a port of its own:
//! `@modelcontextprotocol/server-everything` (npm, in clients/ by
//! `scripts/ensure-clients.sh`) and `mcp-server-time` (PyPI, in
//! clients/.venv-py by `scripts/ensure-python-clients.sh`), both over
//! Streamable HTTP at `/mcp`.

use std::{
    net::{SocketAddr, TcpListener},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

const EVERYTHING: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/clients/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
/// The Python of `clients/.venv-py` (`scripts/ensure-python-clients.sh`).
const PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/.venv-py/bin/python");
/// mcp-server-time's own server, served over Streamable HTTP by its SDK.
const TIME_SERVER: &str = "import sys\nfrom mcp_server_time.server import create_server\n\
    create_server('UTC').run('streamable-http', port=int(sys.argv[1]))";
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// An MCP server process on a port of its own, killed on drop.
pub struct McpServer {
    addr: SocketAddr,
    child: Child,
}

impl McpServer {
    /// `@modelcontextprotocol/server-everything` (npm).
    pub async fn everything() -> Self {
        Self::start(|port| {
            let mut command = Command::new("node");
            command.args([EVERYTHING, "streamableHttp"]).env("PORT", port.to_string());
            command
        })
        .await
    }

    /// `mcp-server-time` (PyPI).
    pub async fn time() -> Self {
        Self::start(|port| {
            let mut command = Command::new(PYTHON);
            command.args(["-c", TIME_SERVER, &port.to_string()]);
            command
        })
        .await
    }

    /// Starts the server on a free port. The port is picked here and given
    /// to the server, so another process may take it in between: then the
    /// server exits, or another answers there (not with an MCP server's
    /// JSON-RPC refusal of a GET without a session), and it starts again
    /// on another port.
    async fn start(command: impl Fn(u16) -> Command) -> Self {
        let http = reqwest::Client::new();
        for _ in 0..5 {
            let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            let mut child = command(addr.port())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("the MCP server starts (scripts/ensure-clients.sh and ensure-python-clients.sh install them)");
            let deadline = tokio::time::Instant::now() + START_TIMEOUT;
            while tokio::time::Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                if let Ok(response) = http.get(format!("http://{addr}/mcp")).send().await {
                    let body = response.text().await.unwrap_or_default();
                    if body.contains("jsonrpc") && body.contains("ession") {
                        return Self { addr, child };
                    }
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        panic!("the MCP server did not start");
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}
