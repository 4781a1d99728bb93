//! [`HidingProxy`]: a TCP proxy in front of a Redis that passes every
//! command through except what would show a subscription to another
//! connection: `PUBSUB NUMSUB` / `SHARDNUMSUB` are asked about channels
//! nobody subscribes to (their names changed), so every count is 0 — what
//! a proxy that does not pass subscriptions through (one that pools
//! connections to several servers) answers. Replies pass unchanged.

use std::net::SocketAddr;

use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

pub struct HidingProxy {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for HidingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HidingProxy {
    /// Listens on a free loopback port and forwards to `redis`.
    pub async fn start(redis: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(redis).await else { return };
                    let (client_read, mut client_write) = client.into_split();
                    let (mut server_read, server_write) = server.into_split();
                    let upstream = tokio::spawn(rewrite(client_read, server_write));
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    upstream.abort();
                });
            }
        });
        Self { addr, task }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

/// Copies commands (RESP arrays of bulk strings, as clients send them)
/// from `from` to `to`, renaming the channels of `PUBSUB NUMSUB` and
/// `PUBSUB SHARDNUMSUB`.
async fn rewrite(from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) -> std::io::Result<()> {
    let mut from = BufReader::new(from);
    let mut line = String::new();
    loop {
        line.clear();
        if from.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let Some(count) = line.strip_prefix('*').and_then(|n| n.trim().parse::<usize>().ok()) else {
            // Not an array (an inline command): as it is.
            to.write_all(line.as_bytes()).await?;
            continue;
        };
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            line.clear();
            from.read_line(&mut line).await?;
            let len: usize = line.trim().trim_start_matches('$').parse().map_err(std::io::Error::other)?;
            let mut arg = vec![0; len + 2];
            from.read_exact(&mut arg).await?;
            arg.truncate(len);
            args.push(arg);
        }
        let hides = args.len() > 2
            && args[0].eq_ignore_ascii_case(b"PUBSUB")
            && (args[1].eq_ignore_ascii_case(b"NUMSUB") || args[1].eq_ignore_ascii_case(b"SHARDNUMSUB"));
        if hides {
            for channel in &mut args[2..] {
                channel.extend_from_slice(b":behind-the-proxy");
            }
        }
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(&arg);
            out.extend_from_slice(b"\r\n");
        }
        to.write_all(&out).await?;
    }
}
