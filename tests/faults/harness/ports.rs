//! Free loopback ports for processes the tests start.
//!
//! A port is reserved by binding `127.0.0.1:0`, reading the number the
//! kernel picked and closing the listener again, so the child process can
//! bind it. Between the close and the child's bind another process may take
//! the port; that is rare, and the callers that start processes retry with a
//! fresh port when their child cannot bind.

use std::net::TcpListener;

/// A port nobody listened on a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("a bound listener has an address").port()
}
