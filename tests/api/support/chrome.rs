//! Debian's Chromium driven through chromedriver: one chromedriver per test on a free
//! port, a fresh profile, real clicks and keys, a screenshot of every page. Chromedriver,
//! the browser and the profile are gone when the `Chrome` is dropped, also when the test
//! fails half-way.

use super::{TestApp, free_port, poll};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a page may take to appear. Every page here is served on loopback; ten seconds
/// only matters on a machine busy compiling.
const WAIT: Duration = Duration::from_secs(10);

/// The longest a single WebDriver command may take. Commands that navigate wait for the
/// next page, and one of them can wait forever (chromedriver's tap in a page with scripts
/// off did); the test fails instead of hanging.
const COMMAND: Duration = Duration::from_secs(30);

/// The flags every run uses: no sandbox (we run as root in CI), nothing that phones home
/// or updates itself while a test runs, a profile of our own.
const ARGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

#[derive(Clone, Copy)]
pub enum Screen {
    Desktop,
    /// 390 x 844 CSS pixels at 3x, the size of a current phone.
    Phone,
}

pub struct Setup {
    pub screen: Screen,
    /// `false` starts Chromium with page scripts disabled (our pages must work without).
    pub javascript: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self { screen: Screen::Desktop, javascript: true }
    }
}

/// Starts chromedriver (`$1 --port=$2`) in a process group of its own, with a watchdog
/// that ends the whole group (itself, chromedriver, Chromium and its helpers) as soon as
/// the test process (`$3`) is gone. `Drop` does not run when a test is killed (a nextest
/// timeout, a Ctrl-C; the app under test even answers SIGTERM by stopping its server
/// rather than the process), and a browser must not outlive its test. When chromedriver
/// itself ends (say its port was taken) the shell ends the group too, and `start_driver`
/// sees it exit.
// Fixed sleep kept: the watchdog looks for the test process once a second; a shell cannot
// wait for a process that is not its child, and a second is soon enough to end a browser.
const WATCHDOG: &str = r#"
"$1" --port="$2" </dev/null >/dev/null 2>&1 &
driver=$!
( while kill -0 "$3" 2>/dev/null; do sleep 1; done; kill -KILL 0 ) &
wait "$driver"
kill -KILL 0
"#;

/// A running chromedriver and the profile directory of its browser. Dropping it kills
/// the process group (the watchdog, chromedriver, Chromium and its helpers) and removes
/// the profile.
struct Driver {
    child: Child,
    profile: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group id is the watchdog's pid, which stays ours until we reap it below.
        let _ =
            Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.profile.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.profile);
        }
    }
}

pub struct Chrome {
    pub client: Client,
    /// Prefix of this test's screenshot files.
    test: &'static str,
    shots: AtomicU32,
    // Declared last so the WebDriver client is dropped before the driver is killed.
    _driver: Driver,
}

/// Runs one WebDriver command, failing the test if it errs or never answers.
async fn bounded<T>(what: &str, command: impl Future<Output = Result<T, fantoccini::error::CmdError>>) -> T {
    match tokio::time::timeout(COMMAND, command).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what}: no answer from chromedriver within {COMMAND:?}"),
    }
}

fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("test-artifacts").join("screenshots")
}

fn require(path: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: the real-browser tests (tests/api/e2e.rs) need Debian's Chromium and its \
         driver. Run .ci/run, or install them with `apt-get install -y chromium chromium-driver`."
    );
}

/// Starts chromedriver on a free port and waits until it says it is ready.
async fn start_driver(profile: PathBuf) -> (Driver, u16) {
    // Two tests can pick the same free port between bind and spawn; a second attempt
    // on a fresh port settles it.
    for _ in 0..3 {
        let port = free_port();
        let child = Command::new("sh")
            .args(["-c", WATCHDOG, "watchdog", CHROMEDRIVER, &port.to_string(), &std::process::id().to_string()])
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}"));
        let mut driver = Driver { child, profile: profile.clone() };
        let status = format!("http://127.0.0.1:{port}/status");
        // Ready (`true`), or gone (`false`: the port was taken after all).
        let ready = poll(WAIT, || {
            let exited = driver.child.try_wait().unwrap().is_some();
            let status = &status;
            async move {
                if exited {
                    return Ok(false);
                }
                let Ok(r) = reqwest::get(status).await else { return Err(()) };
                match r.json::<serde_json::Value>().await {
                    Ok(v) if v["value"]["ready"] == true => Ok(true),
                    _ => Err(()),
                }
            }
        })
        .await;
        if ready == Ok(true) {
            return (driver, port);
        }
        // Not ready: drop it (killing it, keeping the profile) and try another port.
        driver.profile = PathBuf::new();
    }
    panic!("{CHROMEDRIVER} did not become ready on loopback");
}

impl Chrome {
    /// A fresh Chromium for the test named `test` (the prefix of its screenshots).
    pub async fn start(test: &'static str, setup: Setup) -> Chrome {
        require(CHROMIUM);
        require(CHROMEDRIVER);
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        // Last run's pictures of this test would mislead whoever looks at the folder.
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&format!("{test}-")) {
                let _ = std::fs::remove_file(entry.path());
            }
        }

        let profile = std::env::temp_dir().join(format!("mcpc-e2e-{test}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&profile).unwrap();
        let (driver, port) = start_driver(profile.clone()).await;

        let mut args: Vec<String> = ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let mut options = serde_json::json!({ "binary": CHROMIUM });
        match setup.screen {
            Screen::Desktop => args.push("--window-size=1280,900".to_owned()),
            Screen::Phone => {
                // Chromium keeps a window at least 500 pixels wide, so the phone's viewport
                // comes from device emulation; the window merely matches it.
                args.push("--window-size=390,844".to_owned());
                options["mobileEmulation"] = serde_json::json!({
                    "deviceMetrics": { "width": 390, "height": 844, "pixelRatio": 3.0, "mobile": true, "touch": true }
                });
            }
        }
        if !setup.javascript {
            args.push("--blink-settings=scriptEnabled=false".to_owned());
        }
        options["args"] = serde_json::json!(args);
        let caps = fantoccini::wd::Capabilities::from_iter([
            ("browserName".to_owned(), serde_json::json!("chrome")),
            ("goog:chromeOptions".to_owned(), options),
            // A page that hangs fails the test in seconds, not after chromedriver's 300.
            ("timeouts".to_owned(), serde_json::json!({ "pageLoad": 15_000, "script": 5_000, "implicit": 0 })),
        ]);
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("chromedriver could not start {CHROMIUM}: {e}"));
        Chrome { client, test, shots: AtomicU32::new(0), _driver: driver }
    }

    /// Ends the WebDriver session (Chromium quits); the driver process dies with `self`.
    pub async fn close(self) {
        let Chrome { client, _driver, .. } = self;
        let _ = client.close().await;
    }

    pub async fn goto(&self, url: &str) {
        bounded(&format!("open {url}"), self.client.goto(url)).await;
    }

    /// The browser's back button.
    pub async fn back(&self) {
        bounded("back", self.client.back()).await;
    }

    /// The browser's forward button.
    pub async fn forward(&self) {
        bounded("forward", self.client.forward()).await;
    }

    /// The browser's reload button.
    pub async fn reload(&self) {
        bounded("reload", self.client.refresh()).await;
    }

    pub async fn url(&self) -> url::Url {
        self.client.current_url().await.unwrap()
    }

    /// Waits until the address bar starts with `prefix` and the page has loaded.
    pub async fn wait_for_url(&self, prefix: &str) -> url::Url {
        let arrived = poll(WAIT, || async {
            let url = self.url().await;
            if url.as_str().starts_with(prefix) && self.ready().await { Ok(url) } else { Err(url) }
        })
        .await;
        match arrived {
            Ok(url) => url,
            Err(url) => panic!("the browser is at {url}, expected {prefix}…; page:\n{}", self.page_text().await),
        }
    }

    async fn ready(&self) -> bool {
        self.client.execute("return document.readyState", vec![]).await.is_ok_and(|v| v == "complete")
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn find(&self, css: &str) -> Element {
        match self.client.wait().at_most(WAIT).for_element(Locator::Css(css)).await {
            Ok(e) => e,
            Err(e) => panic!("no `{css}` on {} ({e}); page:\n{}", self.url().await, self.page_text().await),
        }
    }

    /// Every element matching `css` now (no waiting).
    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap()
    }

    /// Clicks the element as a person would (WebDriver Element Click: scrolled into view,
    /// hit-tested, a real mouse event).
    pub async fn click(&self, css: &str) {
        let el = self.find(css).await;
        bounded(&format!("click `{css}`"), el.click()).await;
    }

    /// Types into a text field, replacing what it held.
    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        el.clear().await.unwrap();
        el.send_keys(text).await.unwrap();
    }

    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// The page as a person reads it (rendered text of `<body>`).
    pub async fn page_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(b) => b.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Presses keys together, as a chord (Shift+Tab): down in order, up in reverse, through
    /// WebDriver actions, so the page sees real key events.
    pub async fn press(&self, keys: &[Key]) {
        let mut actions = KeyActions::new("keyboard".to_owned());
        for k in keys {
            actions = actions.then(KeyAction::Down { value: (*k).into() });
        }
        for k in keys.iter().rev() {
            actions = actions.then(KeyAction::Up { value: (*k).into() });
        }
        bounded("press keys", self.client.perform_actions(actions)).await;
    }

    /// The focused element as `"<tag> <value attribute>"`, e.g. `"button connect"`.
    pub async fn focused(&self) -> String {
        let el = self.client.active_element().await.unwrap();
        format!("{} {}", el.tag_name().await.unwrap(), el.attr("value").await.unwrap().unwrap_or_default())
    }

    /// Saves what the window shows as `test-artifacts/screenshots/<test>-<nn>-<step>.png`.
    pub async fn screenshot(&self, step: &str) {
        let n = self.shots.fetch_add(1, Ordering::Relaxed) + 1;
        let png = self.client.screenshot().await.unwrap();
        let path = screenshot_dir().join(format!("{}-{n:02}-{step}.png", self.test));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A page a person can act on: a heading, no stack trace, no raw error body, not the
    /// browser's own error page. Returns the page's text.
    pub async fn assert_sensible_page(&self) -> String {
        let text = self.page_text().await;
        let url = self.url().await;
        assert!(!url.as_str().starts_with("chrome-error:"), "the browser shows its own error page:\n{text}");
        assert!(!self.all("h1").await.is_empty(), "no heading on {url}:\n{text}");
        for bad in
            ["panicked", "stack backtrace", "RUST_BACKTRACE", "Internal Server Error", "error_description", "{\""]
        {
            assert!(!text.contains(bad), "`{bad}` on {url}:\n{text}");
        }
        text
    }

    /// One of our pages: sensible, in English (`<html lang="en">`, for screen readers and
    /// translation), and without a script (every step works with JavaScript off).
    pub async fn assert_our_page(&self) -> String {
        let text = self.assert_sensible_page().await;
        let url = self.url().await;
        let lang = self.find("html").await.attr("lang").await.unwrap();
        assert_eq!(lang.as_deref(), Some("en"), "lang of {url}");
        assert!(self.all("script").await.is_empty(), "a script on {url}");
        text
    }
}

// ---------------------------------------------------------------------------------------
// The connect flow's steps, as a person takes them in Chromium.

/// Opens the connect link in a browser without a session: it lands on the IdP's login
/// page, where the person types `username` and clicks "Sign in".
pub async fn open_and_sign_in(chrome: &Chrome, app: &TestApp, url: &str, username: &str) {
    chrome.goto(url).await;
    chrome.wait_for_url(&format!("{}/authorize?", app.idp.base_url())).await;
    assert!(chrome.page_text().await.contains("asks you to sign in"));
    chrome.screenshot("idp-login").await;
    chrome.type_into("input[name=username]", username).await;
    chrome.click("button[name=decision][value=allow]").await;
}

/// Waits for our consent page for elicitation `id`; returns its text.
pub async fn on_the_consent_page(chrome: &Chrome, app: &TestApp, id: &str) -> String {
    chrome.wait_for_url(&format!("{}/connect/testp?e={id}", app.base)).await;
    chrome.find("button[name=decision][value=connect]").await;
    chrome.assert_our_page().await
}

/// On the provider's consent page: names the account and clicks Allow or Deny.
pub async fn answer_at_the_provider(chrome: &Chrome, app: &TestApp, account: &str, decision: &str) {
    chrome.wait_for_url(&format!("{}/authorize?", app.provider.base_url())).await;
    chrome.screenshot("provider-consent").await;
    chrome.type_into("input[name=username]", account).await;
    chrome.click(&format!("button[name=decision][value={decision}]")).await;
}

/// Waits for our callback page and returns its heading.
pub async fn callback_heading(chrome: &Chrome, app: &TestApp) -> String {
    chrome.wait_for_url(&format!("{}/connect/testp/callback?", app.base)).await;
    chrome.assert_our_page().await;
    chrome.text("h1").await
}
