//! The `mcp-connect` binary: everything but the allocator is in the library.

/// mimalloc returns freed memory to the system and keeps little per thread: under load the
/// service's RSS stays near its live heap (glibc's arenas kept several times that).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mcp_connect::cli::main()
}
