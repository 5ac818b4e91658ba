//! A TCP proxy that drops the first connections it accepts after reading the request, so the
//! client sees its connection closed without an answer, as after a server crash or a reset.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

pub struct ResetProxy {
    pub address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ResetProxy {
    /// Forwards to `upstream` (host:port), except that the first `drops` connections are
    /// closed as soon as a request arrives on them.
    pub async fn start(upstream: SocketAddr, drops: usize) -> ResetProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if n < drops {
                        let mut buffer = [0u8; 1024];
                        let _ = client.read(&mut buffer).await;
                        drop(client);
                        return;
                    }
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        ResetProxy {
            address,
            accepted,
            task,
        }
    }

    /// How many connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ResetProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
