//! The `mcp-connect` binary: parse the command line and hand over to the library.

use clap::Parser;

/// mimalloc returns freed memory to the system and keeps little per thread: under load the
/// service's RSS stays near its live heap (glibc's arenas kept several times that).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
