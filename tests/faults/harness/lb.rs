//! `FirstLive`: a TCP load balancer in front of the replicas, as simple as
//! a health-checking one looks from a client: each new connection goes to
//! the first replica that accepts it, so once a replica is killed its port
//! refuses and the next connection lands on another.

use std::net::SocketAddr;

use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinSet,
};

pub struct FirstLive {
    addr: SocketAddr,
    /// The accept loop and every connection's copy: aborted on drop.
    tasks: JoinSet<()>,
}

impl FirstLive {
    /// Starts the balancer on a port of its own in front of `backends`
    /// (`host:port`), tried in order.
    pub async fn start(backends: Vec<String>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port for the balancer");
        let addr = listener.local_addr().expect("the balancer's address");
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let backends = backends.clone();
                connections.spawn(async move {
                    for backend in &backends {
                        if let Ok(mut upstream) = TcpStream::connect(backend).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                            return;
                        }
                    }
                });
                // Finished copies are reaped as new connections come.
                while connections.try_join_next().is_some() {}
            }
        });
        Self { addr, tasks }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for FirstLive {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}
