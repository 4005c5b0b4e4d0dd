//! A bare actix-web server on loopback, on a thread and actix system of its own: the proxy
//! phase's upstream and the framework ceiling's handler. Stopped when dropped.

use anyhow::Context;
use std::net::SocketAddr;
use std::time::Duration;

pub struct BareServer {
    pub addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
}

impl BareServer {
    /// Serves what `routes` configures with `workers` workers (actix's defaults otherwise:
    /// the same as the service's, but `tcp_nodelay`, set as the service sets it).
    pub fn start<F>(name: &str, workers: usize, routes: F) -> anyhow::Result<Self>
    where
        F: Fn(&mut actix_web::web::ServiceConfig) + Send + Clone + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = name.to_owned();
        std::thread::Builder::new().name(format!("bench-{name}")).spawn(move || {
            let served = actix_web::rt::System::new().block_on(async move {
                let server = actix_web::HttpServer::new(move || actix_web::App::new().configure(routes.clone()))
                    .workers(workers)
                    .tcp_nodelay(true)
                    .listen(listener)?
                    .run();
                let _ = tx.send(server.handle());
                server.await
            });
            if let Err(e) = served {
                eprintln!("bench {thread}: {e}");
            }
        })?;
        let handle = rx.recv_timeout(Duration::from_secs(10)).with_context(|| format!("bench {name} did not start"))?;
        Ok(Self { addr, handle })
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for BareServer {
    fn drop(&mut self) {
        // Stops accepting and ends the system's thread; nothing waits for it.
        drop(self.handle.stop(false));
    }
}
