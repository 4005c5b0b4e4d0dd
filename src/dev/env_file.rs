//! The dotenv file `dev` writes for scripts: owner-only, never through a symbolic link.

use std::path::Path;

/// Writes the env file (it holds keys and secrets) readable by its owner only: into a new
/// file of mode 0600 beside it, then renamed over it. An existing file's looser mode is not
/// kept (opening it with `mode` would), and a symbolic link at the path is replaced, never
/// followed to write somewhere else.
pub(super) fn write_env_file(path: &Path, vars: &[(&str, &str)]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut text = String::from("# Written by `mcp-connect dev`: development values, valid while it runs.\n");
    for (k, v) in vars {
        text.push_str(&format!("{k}={v}\n"));
    }
    let named = |e: std::io::Error| anyhow::anyhow!("--env-file {}: {e}", path.display());
    let name = path.file_name().ok_or_else(|| anyhow::anyhow!("--env-file {}: not a file name", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", crate::crypto::random_token(6)));
    let tmp = path.with_file_name(tmp_name);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written =
        opts.open(&tmp).and_then(|mut f| f.write_all(text.as_bytes())).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(named(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::write_env_file;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_env_file_is_owner_only_even_when_it_existed_and_a_symlink_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("mcpc-envfile-{}", crate::crypto::random_token(6)));
        std::fs::create_dir_all(&dir).unwrap();
        // An existing file, readable by everyone: rewritten 0600.
        let existing = dir.join("dev.env");
        std::fs::write(&existing, "old").unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_env_file(&existing, &[("K", "secret")]).unwrap();
        assert_eq!(mode(&existing), 0o600);
        assert!(std::fs::read_to_string(&existing).unwrap().contains("K=secret"));
        // A symbolic link to another file: that file is not written; the link is replaced.
        let target = dir.join("elsewhere");
        std::fs::write(&target, "keep me").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.join("linked.env");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_env_file(&link, &[("K", "secret")]).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(mode(&link), 0o600);
        // No temporary file is left.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 3, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
