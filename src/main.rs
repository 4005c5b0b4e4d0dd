//! The `mcp-connect` binary: parse the command line and hand over to the library.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = mcp_connect::cli::Cli::parse();
    match mcp_connect::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-connect: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
