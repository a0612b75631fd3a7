//! The `hourglass` broker binary: parse settings, serve until SIGINT/SIGTERM.

use clap::Parser;
use hourglass_server::{Cli, Config, Server};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    hourglass_server::init_logging();
    let config = Config::resolve(Cli::parse())?;
    let server = Server::bind(config).await?;
    server.run(hourglass_server::shutdown_signal()).await
}
