//! What the client authenticates with: an API key, or a workload token its platform gives
//! it (a Kubernetes projected service-account token, a GitHub Actions or SPIFFE token, an
//! OAuth client-credentials token), which mcp-connect takes in the key's place where the
//! tenant trusts the issuer (docs/workload-identity.md).

use crate::secret::ApiKey;
use secrecy::SecretString;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// An API key or a token source; `Client::new` takes either.
#[derive(Clone, Debug)]
pub enum Credential {
    ApiKey(ApiKey),
    Token(TokenSource),
}

impl From<ApiKey> for Credential {
    fn from(k: ApiKey) -> Self {
        Self::ApiKey(k)
    }
}

impl From<TokenSource> for Credential {
    fn from(t: TokenSource) -> Self {
        Self::Token(t)
    }
}

impl Credential {
    /// The bearer for the next request.
    pub(crate) fn bearer(&self) -> Result<SecretString, crate::Error> {
        match self {
            Self::ApiKey(k) => Ok(SecretString::from(k.expose_secret().to_owned())),
            Self::Token(t) => t.current(),
        }
    }
}

type Function = dyn Fn() -> Result<String, String> + Send + Sync;

/// Where the workload token comes from: a file read again whenever it changes (the kubelet
/// replaces a projected token's file before the token expires), or a function called for
/// each request.
#[derive(Clone)]
pub struct TokenSource(Source);

#[derive(Clone)]
enum Source {
    File(Arc<TokenFile>),
    Function(Arc<Function>),
}

struct TokenFile {
    path: PathBuf,
    /// The file as last read: its identity (inode, modification time, length) and token.
    held: Mutex<Option<(Stamp, SecretString)>>,
}

type Stamp = (u64, Option<std::time::SystemTime>, u64);

impl TokenSource {
    /// The token in the file at `path` (surrounding whitespace removed), read again when
    /// the file (or the file a symlink points at) changed.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self(Source::File(Arc::new(TokenFile { path: path.into(), held: Mutex::new(None) })))
    }

    /// The token `f` returns, called for each request; its error is reported as
    /// [`crate::Error::Token`].
    pub fn function(f: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> Self {
        Self(Source::Function(Arc::new(f)))
    }

    fn current(&self) -> Result<SecretString, crate::Error> {
        match &self.0 {
            Source::Function(f) => {
                let t = f().map_err(crate::Error::Token)?;
                nonempty(t.trim().to_owned(), "the token function returned an empty token")
            }
            Source::File(file) => file.current(),
        }
    }
}

fn nonempty(t: String, why: &str) -> Result<SecretString, crate::Error> {
    if t.is_empty() { Err(crate::Error::Token(why.to_owned())) } else { Ok(SecretString::from(t)) }
}

impl TokenFile {
    fn current(&self) -> Result<SecretString, crate::Error> {
        let at = self.path.display();
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| crate::Error::Token(format!("cannot read the token file {at}: {}", e.kind())))?;
        let stamp = stamp(&meta);
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((s, token)) = held.as_ref()
            && *s == stamp
        {
            return Ok(token.clone());
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| crate::Error::Token(format!("cannot read the token file {at}: {}", e.kind())))?;
        let token = nonempty(text.trim().to_owned(), &format!("the token file {at} is empty"))?;
        *held = Some((stamp, token.clone()));
        Ok(token)
    }
}

#[cfg(unix)]
fn stamp(m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (m.ino(), m.modified().ok(), m.len())
}

#[cfg(not(unix))]
fn stamp(m: &std::fs::Metadata) -> Stamp {
    (0, m.modified().ok(), m.len())
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::File(t) => write!(f, "TokenSource::File({})", t.path.display()),
            Source::Function(_) => f.write_str("TokenSource::Function"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn a_token_file_is_read_again_when_it_is_replaced_and_never_printed() {
        let dir = std::env::temp_dir().join(format!("mcpc-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first.token.value\n").unwrap();
        let source = TokenSource::file(&path);
        assert_eq!(source.current().unwrap().expose_secret(), "first.token.value");
        // As the kubelet does: a new file moved into place.
        let next = dir.join("token.new");
        std::fs::write(&next, "second.token.value-longer").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(source.current().unwrap().expose_secret(), "second.token.value-longer");
        assert!(!format!("{source:?}").contains("token.value"));
        std::fs::write(&path, "  \n").unwrap();
        let e = source.current().unwrap_err().to_string();
        assert!(e.contains("empty") && !e.contains("token.value"), "{e}");
        std::fs::remove_file(&path).unwrap();
        assert!(source.current().unwrap_err().to_string().contains("cannot read the token file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_token_function_is_called_for_each_request() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let m = n.clone();
        let source =
            TokenSource::function(move || Ok(format!("token-{}", m.fetch_add(1, std::sync::atomic::Ordering::SeqCst))));
        let c = Credential::from(source);
        assert_eq!(c.bearer().unwrap().expose_secret(), "token-0");
        assert_eq!(c.bearer().unwrap().expose_secret(), "token-1");
        let failing = Credential::from(TokenSource::function(|| Err("the platform's agent is down".to_owned())));
        assert!(matches!(failing.bearer(), Err(crate::Error::Token(_))));
    }
}
