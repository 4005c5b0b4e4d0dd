//! SoftHSM2 for the PKCS#11 key-store tests: a token of the test's own in the directory
//! `SOFTHSM2_CONF` (set for every test process by .cargo/config.toml) names, made before
//! the test process loads the module (SoftHSM reads its tokens when it is initialised), and
//! its key-encryption key made through the service's own `create_kek`.

use mcp_connect::vault::kek::pkcs11::{Pkcs11KeyStore, Pkcs11Settings};
use std::path::PathBuf;

pub const PIN: &str = "1234";

pub struct Hsm {
    pub settings: Pkcs11Settings,
    /// The PIN in a file, for `[vault.pkcs11] pin_file`.
    pub pin_file: PathBuf,
}

impl Hsm {
    /// `[vault]` for the service, with this token and key.
    pub fn toml(&self) -> String {
        format!(
            "[vault]\nstore = \"pkcs11\"\n[vault.pkcs11]\nmodule = {:?}\ntoken_label = {:?}\nkey_label = {:?}\npin_file = {:?}\n",
            self.settings.module, self.settings.token_label, self.settings.key_label, self.pin_file
        )
    }
}

/// Debian's SoftHSM2 module (`scripts/test` installs `softhsm2`).
fn module() -> PathBuf {
    ["/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("SoftHSM2 is not installed: scripts/test installs Debian's softhsm2")
}

/// A new token with a key-encryption key labelled `key_label`.
pub async fn token_with_kek(key_label: &str) -> Hsm {
    let conf = PathBuf::from(std::env::var_os("SOFTHSM2_CONF").expect("SOFTHSM2_CONF (.cargo/config.toml)"));
    let dir = conf.parent().unwrap().to_owned();
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    if !conf.exists() {
        // Written whole and renamed: tests in parallel processes see it complete or not at all.
        let text =
            format!("directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n", tokens.display());
        let tmp = dir.join(format!("softhsm2.conf.{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &conf).unwrap();
    }
    let token_label = format!("t-{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
    let out = std::process::Command::new("softhsm2-util")
        .args(["--init-token", "--free", "--label", &token_label, "--pin", PIN, "--so-pin", "5678"])
        .output()
        .expect("softhsm2-util: scripts/test installs Debian's softhsm2");
    assert!(out.status.success(), "softhsm2-util: {}", String::from_utf8_lossy(&out.stderr));
    let pin_file = dir.join(format!("pin-{token_label}"));
    std::fs::write(&pin_file, PIN).unwrap();
    let settings = Pkcs11Settings {
        module: module(),
        token_label,
        key_label: key_label.to_owned(),
        pin: secrecy::SecretString::from(PIN.to_owned()),
    };
    Pkcs11KeyStore::create_kek(settings.clone()).await.unwrap();
    Hsm { settings, pin_file }
}

/// Destroys the key labelled `label` in the token: what it wrapped unwraps no more.
pub fn destroy_key(hsm: &Hsm, label: &str) {
    use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
    use cryptoki::object::Attribute;
    use cryptoki::session::UserType;
    let ctx = Pkcs11::new(&hsm.settings.module).unwrap();
    let _already = ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK));
    let slot = ctx
        .get_slots_with_token()
        .unwrap()
        .into_iter()
        .find(|s| ctx.get_token_info(*s).unwrap().label() == hsm.settings.token_label)
        .unwrap();
    let session = ctx.open_rw_session(slot).unwrap();
    let _already = session.login(UserType::User, Some(&hsm.settings.pin));
    for key in session.find_objects(&[Attribute::Label(label.as_bytes().to_vec())]).unwrap() {
        session.destroy_object(key).unwrap();
    }
}
