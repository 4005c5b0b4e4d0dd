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
        text.push_str(&format!("{k}={}\n", shell_value(v)));
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

/// A value as `. file` reads it back unchanged: as it is when it holds only characters a
/// shell takes literally, else in single quotes (a `--mcp-url` may hold `$(…)`, `;` or `&`).
fn shell_value(v: &str) -> String {
    let literal = |c: char| c.is_ascii_alphanumeric() || "_-.,:/@%+=".contains(c);
    if !v.is_empty() && v.chars().all(literal) { v.to_owned() } else { format!("'{}'", v.replace('\'', "'\\''")) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{shell_value, write_env_file};
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

    #[test]
    fn values_read_back_unchanged_by_the_shell_and_nothing_in_them_runs() {
        let dir = std::env::temp_dir().join(format!("mcpc-envfile-q-{}", crate::crypto::random_token(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("ran");
        let tricky = format!("http://127.0.0.1:8090/mcp$(touch {})?a=1&b=2;x'y", marker.display());
        let plain = "mcpc_0123_abc-DEF+/=";
        assert_eq!(shell_value(plain), plain, "plain values stay readable");
        let file = dir.join("dev.env");
        write_env_file(&file, &[("TRICKY", &tricky), ("PLAIN", plain)]).unwrap();
        let script = format!("set -a; . '{}'; printf '%s\\n%s' \"$TRICKY\" \"$PLAIN\"", file.display());
        let out = std::process::Command::new("sh").arg("-c").arg(script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{tricky}\n{plain}"));
        assert!(!marker.exists(), "nothing in a value ran");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
