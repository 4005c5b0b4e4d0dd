//! The browser surface's one place where a flow's refusal or fault becomes a page: its
//! kind (and so its status and Retry-After), title, what happened and what to do. Handlers
//! map errors with these functions and nothing else.

use super::pages::{HINT_RETRY, PageError, PageKind, RefusedPage};
use crate::domain::{ElicitationId, ElicitationStatus, ProviderId};
use crate::flows::Fault;
use crate::flows::callback::{CallbackError, CallbackFailure, CallbackRefusal};
use crate::flows::connect::{ConnectError, EntryRefusal};
use crate::flows::login::LoginError;
use crate::http::middleware::RequestId;
use crate::oauth::callback::CallbackQuery;

/// A fault on our side: a generic page, the detail in the log.
pub fn fault(rid: &RequestId, f: &Fault) -> PageError {
    PageError::internal(&rid.0, f)
}

pub fn unknown_link(rid: &RequestId) -> PageError {
    PageError::new(
        rid,
        PageKind::NotFound,
        "This link is not valid",
        "There is no connect request behind this link.",
        HINT_RETRY,
    )
}

pub fn entry_error(rid: &RequestId, r: EntryRefusal) -> PageError {
    match r {
        EntryRefusal::NotFound | EntryRefusal::ProviderMismatch => unknown_link(rid),
        EntryRefusal::Expired => PageError::new(
            rid,
            PageKind::Gone,
            "This link has expired",
            "Connect links are valid for a few minutes only.",
            HINT_RETRY,
        ),
        EntryRefusal::Finished(ElicitationStatus::Completed) => PageError {
            outcome: None,
            ..PageError::new(
                rid,
                PageKind::Gone,
                "This link was already used",
                "The connection it asked for has been made.",
                "Go back to your assistant; it can use the connection now.",
            )
        },
        EntryRefusal::ClosedInAssistant => PageError::new(
            rid,
            PageKind::Gone,
            "You closed this request in your assistant",
            "You answered the request in your assistant without connecting, so this link no longer works.",
            "If you want to connect after all, ask your assistant again; it will give you a new link.",
        ),
        EntryRefusal::Finished(_) => PageError::new(
            rid,
            PageKind::Gone,
            "This link is no longer active",
            "The request was declined or cancelled.",
            HINT_RETRY,
        ),
    }
}

/// Maps a refusal to its page; with a session, the identity mismatch gets its own page,
/// whose Sign out leads back to this link (`link`: provider and elicitation) with a fresh
/// account choice.
pub fn connect_error(
    rid: &RequestId,
    session: Option<&super::BrowserSession>,
    link: (&ProviderId, &ElicitationId),
    e: ConnectError,
) -> PageError {
    match e {
        ConnectError::Entry(r) => entry_error(rid, r),
        ConnectError::IdentityMismatch => {
            // Only a signed-in person can be someone else; without a session the flow
            // never says this, and the link is then simply not one to explain.
            let Some(session) = session else { return unknown_link(rid) };
            let return_to = format!("/connect/{}?e={}", link.0, link.1);
            let page = RefusedPage {
                signed_in_as: session.info.subject.as_str(),
                csrf: session.csrf(),
                request_id: &rid.0,
                return_to: &return_to,
            };
            PageError::with_page(rid, PageKind::Forbidden, "This link was made for another account", &page)
        }
        ConnectError::ProviderNotAllowed => unknown_link(rid),
        ConnectError::NotOAuth => PageError::new(
            rid,
            PageKind::Refused,
            "This provider is connected with a form",
            "It takes a key or password typed on the connect page, not a sign-in at the provider.",
            HINT_RETRY,
        ),
        ConnectError::ProviderDisabled => PageError::new(
            rid,
            PageKind::Unavailable,
            "Connecting this provider is paused",
            "The operator of this service has paused new connections to this provider.",
            "Try again later, or ask your administrator.",
        ),
        ConnectError::Resolve(e) if !e.is_transient() => {
            tracing::error!(error = %e, "a provider's configuration or server is refused");
            let t = PROVIDER_REFUSED;
            PageError::new(rid, t.kind, t.title, t.message, t.hint)
        }
        ConnectError::Resolve(e) => {
            tracing::error!(error = %e, "provider resolution failed");
            PageError::new(
                rid,
                PageKind::Unavailable,
                "The provider is unavailable",
                "Its sign-in could not be reached.",
                "Try again in a minute.",
            )
        }
        ConnectError::Fault(f) => fault(rid, &f),
    }
}

pub fn callback_error(rid: &RequestId, q: &CallbackQuery, f: CallbackFailure) -> PageError {
    let reason = f.error.code();
    metrics::counter!(crate::telemetry::metrics::CONNECT_FAILURES, "reason" => reason).increment(1);
    // What the provider said, where it said something (its error code and description,
    // cleaned: `oauth::flow::server_error_answer`), never a token or code of ours.
    let answer = match &f.error {
        CallbackError::Refused(CallbackRefusal::Exchange(e)) => Some(e.to_string()),
        _ => None,
    };
    tracing::warn!(
        reason,
        provider_answer = answer.as_deref(),
        provider_revocation = f.provider_revocation.as_deref(),
        query = %q.describe(),
        "callback refused"
    );
    match f.error {
        CallbackError::Refused(r) => {
            let t = refusal_text(r);
            PageError::new(rid, t.kind, t.title, t.message, t.hint)
        }
        CallbackError::Fault(f) => fault(rid, &f),
    }
}

/// What a refusal page says: status, title, what happened, what to do.
struct RefusalText {
    kind: PageKind,
    title: &'static str,
    message: &'static str,
    hint: &'static str,
}

const fn refused(message: &'static str) -> RefusalText {
    RefusalText { kind: PageKind::Refused, title: "The connection was refused", message, hint: HINT_RETRY }
}

const OTHER_SESSION: RefusalText = RefusalText {
    kind: PageKind::Forbidden,
    title: "The connection was refused",
    message: "This answer belongs to a sign-in in another browser or session.",
    hint: HINT_RETRY,
};
const PROVIDER_ERROR: RefusalText = RefusalText {
    kind: PageKind::ProviderFailed,
    title: "The provider reported an error",
    message: "The provider answered with an error instead of a grant.",
    hint: "You can open the same link again and retry.",
};
const ANSWER_FAILED_CHECKS: RefusalText = RefusalText {
    kind: PageKind::ProviderFailed,
    title: "The provider's answer did not pass the checks",
    message: "mcp-connect checks each answer of the provider before it keeps anything, and this one failed a check.",
    hint: "You can open the same link again and retry.",
};
const CONNECTED_CONCURRENTLY: RefusalText = RefusalText {
    kind: PageKind::Conflict,
    title: "Connected in another window",
    message: "This account was connected from another window a moment ago; that connection is kept and the \
              duplicate grant made here was not stored (it is revoked at the provider where the provider allows).",
    hint: "Nothing more to do. If your assistant still asks, open the link again.",
};
const ACCOUNT_MISMATCH: RefusalText = RefusalText {
    kind: PageKind::Conflict,
    title: "A different account is already connected",
    message: "You signed in at the provider with another account than the one already connected here. The \
              existing connection was kept.",
    hint: "Sign in at the provider with the account you connected before, or ask your administrator to remove \
           the old connection.",
};
const PROVIDER_PAUSED: RefusalText = RefusalText {
    kind: PageKind::Unavailable,
    title: "Connecting this provider is paused",
    message: "The operator of this service has paused connections to this provider.",
    hint: "Try again later, or ask your administrator.",
};
const PROVIDER_UNAVAILABLE: RefusalText = RefusalText {
    kind: PageKind::Unavailable,
    title: "The provider is unavailable",
    message: "The provider did not answer, or answered that it is busy.",
    hint: "Open the same link again in a minute.",
};

/// The provider's configuration, or what its server says of itself, is refused: waiting
/// does not help, the operator must act.
const PROVIDER_REFUSED: RefusalText = RefusalText {
    kind: PageKind::ProviderFailed,
    title: "This provider's configuration is refused",
    message: "mcp-connect cannot use this provider as it is configured, or as its server describes itself.",
    hint: "Trying again will not help: ask your administrator (the service log says what is refused).",
};

/// The page for each refusal.
fn refusal_text(r: CallbackRefusal) -> RefusalText {
    match r {
        CallbackRefusal::MissingState | CallbackRefusal::StateUnknown => {
            refused("This answer from the provider is unknown or was already used.")
        }
        CallbackRefusal::StateExpired => refused("This answer from the provider came too late."),
        CallbackRefusal::NoSession | CallbackRefusal::SessionMismatch => OTHER_SESSION,
        CallbackRefusal::ProviderMismatch | CallbackRefusal::RedirectMismatch | CallbackRefusal::Iss(_) => {
            refused("The answer did not come from the provider this request was sent to.")
        }
        CallbackRefusal::ElicitationGone => refused("The connect request is no longer active."),
        CallbackRefusal::ProviderError(_) => PROVIDER_ERROR,
        // Down, slow, or a body that is not a token response: an outage, not a refusal.
        CallbackRefusal::Exchange(crate::oauth::flow::FlowError::Transient(_)) => PROVIDER_UNAVAILABLE,
        CallbackRefusal::MissingCode
        | CallbackRefusal::Exchange(_)
        | CallbackRefusal::Account
        | CallbackRefusal::UserinfoSubject(_) => ANSWER_FAILED_CHECKS,
        CallbackRefusal::ConnectedConcurrently => CONNECTED_CONCURRENTLY,
        CallbackRefusal::AccountMismatch => ACCOUNT_MISMATCH,
        CallbackRefusal::ProviderDisabled => PROVIDER_PAUSED,
        CallbackRefusal::Resolve(e) if !e.is_transient() => PROVIDER_REFUSED,
        CallbackRefusal::Resolve(_) => PROVIDER_UNAVAILABLE,
    }
}

/// A typed credential not kept, where the form is not shown again.
pub fn credential_error(rid: &RequestId, r: crate::flows::credential::CredentialRefusal) -> PageError {
    use crate::flows::credential::CredentialRefusal as R;
    let t = match r {
        R::NotACredentialProvider => {
            return PageError::new(
                rid,
                PageKind::Refused,
                "This provider is connected at its own sign-in",
                "It takes no key or password typed here.",
                HINT_RETRY,
            );
        }
        R::Unavailable => PROVIDER_UNAVAILABLE,
        R::TooManyAttempts => {
            return PageError::new(
                rid,
                PageKind::Refused,
                "Too many attempts",
                "The provider refused what was typed several times; nothing more is sent to it for now.",
                "Try again in an hour: a new link from your assistant will not lift the limit sooner.",
            );
        }
        R::AccountMismatch => RefusalText {
            kind: PageKind::Conflict,
            title: "A different account is already connected",
            message: "What you typed belongs to another account than the one already connected here. The existing \
                      connection was kept.",
            hint: "Type the credentials of the account you connected before, or disconnect it first at Your \
                   connections.",
        },
        R::ConnectedConcurrently => CONNECTED_CONCURRENTLY,
        R::ElicitationGone | R::Form(_) | R::Refused(_) => refused("The connect request is no longer active."),
    };
    PageError::new(rid, t.kind, t.title, t.message, t.hint)
}

pub fn login_error(rid: &RequestId, e: LoginError) -> PageError {
    tracing::warn!(reason = %e, "login refused");
    match e {
        LoginError::Unavailable(_) => PageError::new(
            rid,
            PageKind::Unavailable,
            "Sign-in is unavailable",
            "The identity provider could not be reached.",
            "Try again in a minute.",
        ),
        LoginError::StateUnusable => PageError::new(
            rid,
            PageKind::Refused,
            "This sign-in has expired",
            "The sign-in was started in another browser, was already finished, or took too long.",
            HINT_RETRY,
        ),
        LoginError::ProviderError(_) | LoginError::MissingCode => PageError::new(
            rid,
            PageKind::Refused,
            "Sign-in was not completed",
            "The identity provider did not sign you in.",
            HINT_RETRY,
        ),
        LoginError::Flow(crate::oauth::flow::FlowError::Transient(_)) => PageError::new(
            rid,
            PageKind::Unavailable,
            "Sign-in is unavailable",
            "The identity provider could not be reached.",
            "Try again in a minute.",
        ),
        LoginError::Iss(_) | LoginError::OtherIdpsCallback | LoginError::Flow(_) | LoginError::BadSubject => {
            PageError::new(
                rid,
                PageKind::Refused,
                "Sign-in was refused",
                "The answer from the identity provider did not pass the security checks.",
                HINT_RETRY,
            )
        }
        LoginError::Fault(f) => fault(rid, &f),
    }
}

/// A form posted without a live session.
pub fn session_expired(rid: &RequestId, hint: &'static str) -> PageError {
    PageError::new(
        rid,
        PageKind::Forbidden,
        "Your sign-in has expired",
        "This form belongs to a session that is no longer active.",
        hint,
    )
}

pub fn forbidden_csrf(rid: &RequestId, hint: &'static str) -> PageError {
    PageError::new(
        rid,
        PageKind::Forbidden,
        "This form has expired",
        "The page was not sent by this session (missing or wrong security token).",
        hint,
    )
}
