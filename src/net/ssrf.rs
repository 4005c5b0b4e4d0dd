//! Guards against server-side request forgery, for every outbound client whose URLs come
//! from someone else (a tenant's webhook endpoint, a provider's discovery document): a URL
//! is checked as given ([`check_url`]: https, no credentials, an IP literal judged at once),
//! and every address a client is about to connect to is checked again by its resolver
//! ([`GuardedResolver`]): a name that resolved to a public address when it was checked and
//! to `10.0.0.1` now (DNS rebinding) is refused on the address actually used.
//! Hand-written: no maintained crate checks resolved addresses for reqwest.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use url::Url;

/// What may be reached besides public addresses.
#[derive(Debug, Clone, Copy, Default)]
pub struct AddressPolicy {
    /// Loopback addresses, and `http://` to them (`webhooks.allow_loopback`; `dev` sets it).
    pub allow_loopback: bool,
    /// Private, unique-local and shared (CGNAT) ranges (`webhooks.allow_private`).
    pub allow_private: bool,
}

/// Why an endpoint or an address is refused: a stable reason for the admin API and the
/// delivery log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("only https URLs (http on loopback only where allowed)")]
    NotHttps,
    #[error("the URL has no host, or has a user name or password")]
    BadUrl,
    #[error("a loopback address")]
    Loopback,
    #[error("a private, unique-local or shared address")]
    Private,
    #[error("a link-local address (this covers cloud metadata services)")]
    LinkLocal,
    #[error("an unspecified, broadcast, multicast, documentation or reserved address")]
    Reserved,
    #[error("the name resolves to no address that may be reached")]
    NoAddress,
    #[error("a cloud metadata service")]
    Metadata,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::NotHttps => "not_https",
            Refusal::BadUrl => "bad_url",
            Refusal::Loopback => "loopback_address",
            Refusal::Private => "private_address",
            Refusal::LinkLocal => "link_local_address",
            Refusal::Reserved => "reserved_address",
            Refusal::NoAddress => "no_allowed_address",
            Refusal::Metadata => "metadata_address",
        }
    }
}

/// Cloud metadata services outside link-local space, refused whatever the policy allows:
/// Alibaba's (in the shared range `allow_private` opens); AWS's IPv6 ones (instance
/// metadata fd00:ec2::254, EKS Pod Identity fd00:ec2::23: all of fd00:ec2::/32 is refused).
/// (169.254.169.254 and the like are refused as link-local.)
const METADATA: &[IpAddr] = &[IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200))];

/// Whether `ip` may be connected to. An IPv4-mapped IPv6 address is judged as the IPv4
/// address it carries; the deprecated IPv4-compatible ones (`::/96`) are refused outright.
pub fn check_ip(ip: IpAddr, policy: AddressPolicy) -> Result<(), Refusal> {
    let canonical = ip.to_canonical();
    let aws = matches!(canonical, IpAddr::V6(v6) if v6.segments()[..2] == [0xfd00, 0x0ec2]);
    if aws || METADATA.contains(&canonical) {
        return Err(Refusal::Metadata);
    }
    match ip {
        IpAddr::V4(v4) => check_v4(v4, policy),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => check_v4(v4, policy),
            None => check_v6(v6, policy),
        },
    }
}

fn check_v4(ip: Ipv4Addr, policy: AddressPolicy) -> Result<(), Refusal> {
    let o = ip.octets();
    if ip.is_loopback() {
        return if policy.allow_loopback { Ok(()) } else { Err(Refusal::Loopback) };
    }
    if ip.is_link_local() {
        return Err(Refusal::LinkLocal);
    }
    // 100.64.0.0/10 is carrier-grade NAT space: internal as much as 10/8.
    if ip.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
        return if policy.allow_private { Ok(()) } else { Err(Refusal::Private) };
    }
    let reserved = ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 192 && o[1] == 88 && o[2] == 99)
        || (o[0] == 198 && (o[1] & 0xfe) == 18);
    if reserved { Err(Refusal::Reserved) } else { Ok(()) }
}

fn check_v6(ip: Ipv6Addr, policy: AddressPolicy) -> Result<(), Refusal> {
    let s = ip.segments();
    if ip.is_loopback() {
        return if policy.allow_loopback { Ok(()) } else { Err(Refusal::Loopback) };
    }
    if (s[0] & 0xffc0) == 0xfe80 {
        return Err(Refusal::LinkLocal);
    }
    if (s[0] & 0xfe00) == 0xfc00 {
        return if policy.allow_private { Ok(()) } else { Err(Refusal::Private) };
    }
    // Only global unicast (2000::/3) is public; of it, documentation (2001:db8::/32,
    // 3fff::/20), the IETF protocol assignments (2001::/23: Teredo, ORCHID, benchmarking)
    // and 6to4 (2002::/16, which can carry an internal IPv4 address) are not.
    // (64:ff9b::/96 NAT64 and ::/96 lie outside 2000::/3 and are refused with it.)
    let global = (s[0] & 0xe000) == 0x2000;
    let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000);
    let special = (s[0] == 0x2001 && s[1] < 0x0200) || s[0] == 0x2002;
    if global && !documentation && !special { Ok(()) } else { Err(Refusal::Reserved) }
}

/// An endpoint URL as registered: `https` (or `http` to a loopback address where loopback
/// is allowed), a host, no user name or password; an IP literal is judged at once (names are
/// judged when they are resolved, on every delivery).
pub fn check_url(url: &Url, policy: AddressPolicy) -> Result<(), Refusal> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refusal::BadUrl);
    }
    let host = url.host().ok_or(Refusal::BadUrl)?;
    let (literal, loopback_name) = match host {
        url::Host::Ipv4(v4) => (Some(IpAddr::V4(v4)), false),
        url::Host::Ipv6(v6) => (Some(IpAddr::V6(v6)), false),
        url::Host::Domain(d) => (None, is_loopback_name(d)),
    };
    match url.scheme() {
        "https" => {}
        // A loopback address, or `localhost`: the guard's resolver lets such a name reach
        // loopback addresses only (see `GuardedResolver`), so plain http never leaves the host.
        "http" if policy.allow_loopback && (literal.is_some_and(|ip| ip.is_loopback()) || loopback_name) => {}
        _ => return Err(Refusal::NotHttps),
    }
    match literal {
        Some(ip) => check_ip(ip, policy),
        None => Ok(()),
    }
}

/// `localhost` and the names under it (RFC 6761 §6.3), which name this host: resolved, they
/// are reached on loopback addresses only.
pub fn is_loopback_name(host: &str) -> bool {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    h == "localhost" || h.ends_with(".localhost")
}

/// Name resolution, replaceable in tests (a resolver that answers the address under test,
/// so a refusal is proven without a packet sent to it).
pub trait Lookup: Send + Sync + 'static {
    fn lookup(&self, host: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;
}

/// The system's resolver.
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.map(|a| a.ip()).collect()) })
    }
}

/// Resolves, then keeps only the addresses the policy allows; none left is an error, so
/// the client never connects to a refused address.
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
    policy: AddressPolicy,
}

impl GuardedResolver {
    pub fn new(lookup: Arc<dyn Lookup>, policy: AddressPolicy) -> Self {
        Self { lookup, policy }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (lookup, policy, host) = (self.lookup.clone(), self.policy, name.as_str().to_owned());
        // `localhost` reaches this host or nothing (RFC 6761 §6.3): a resolver that maps it
        // elsewhere is not followed, and plain http to it (allowed with loopback) stays local.
        let loopback_only = is_loopback_name(&host);
        Box::pin(async move {
            // A name that does not resolve is refused as one that resolves only to refused
            // addresses: two codes would tell a tenant which internal names exist.
            let Ok(found) = lookup.lookup(host).await else {
                return Err(Box::new(Refusal::NoAddress) as Box<dyn std::error::Error + Send + Sync>);
            };
            let mut refusal = Refusal::NoAddress;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|ip| match check_ip(*ip, policy) {
                    Ok(()) if loopback_only && !ip.to_canonical().is_loopback() => {
                        refusal = Refusal::NoAddress;
                        false
                    }
                    Ok(()) => true,
                    Err(r) => {
                        refusal = r;
                        false
                    }
                })
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(refusal) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The resolver of the clients that reach what the configuration names (no SSRF policy: the
/// operator's word): as the system resolves, but `localhost` and the names under it are this
/// host's loopback addresses without a lookup (RFC 6761 §6.3), so a configured
/// `http://localhost:…` never goes to whatever a DNS server or search domain answers for it.
pub struct LoopbackPinned {
    lookup: Arc<dyn Lookup>,
}

impl LoopbackPinned {
    pub fn new(lookup: Arc<dyn Lookup>) -> Self {
        Self { lookup }
    }
}

impl reqwest::dns::Resolve for LoopbackPinned {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (lookup, host) = (self.lookup.clone(), name.as_str().to_owned());
        Box::pin(async move {
            let found = if is_loopback_name(&host) {
                vec![IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)]
            } else {
                lookup.lookup(host).await.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?
            };
            Ok(Box::new(found.into_iter().map(|ip| SocketAddr::new(ip, 0))) as reqwest::dns::Addrs)
        })
    }
}

/// The refusal behind a failed request, if the guard refused it.
pub fn refusal_of(e: &reqwest::Error) -> Option<Refusal> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<Refusal>() {
            return Some(*r);
        }
        source = s.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An input, and the verdict under the strict policy and under a laxer one.
    type Case = (&'static str, Result<(), Refusal>, Result<(), Refusal>);

    #[test]
    fn addresses_are_judged_by_range() {
        let strict = AddressPolicy::default();
        let lax = AddressPolicy { allow_loopback: true, allow_private: true };
        let cases: &[Case] = &[
            ("93.184.216.34", Ok(()), Ok(())),
            ("2606:2800:220:1:248:1893:25c8:1946", Ok(()), Ok(())),
            ("127.0.0.1", Err(Refusal::Loopback), Ok(())),
            ("127.8.9.10", Err(Refusal::Loopback), Ok(())),
            ("::1", Err(Refusal::Loopback), Ok(())),
            ("::ffff:127.0.0.1", Err(Refusal::Loopback), Ok(())),
            ("::127.0.0.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("::8.8.8.8", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("192.88.99.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("2001:10::1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("2001::1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("3fff::1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("10.0.0.1", Err(Refusal::Private), Ok(())),
            ("172.16.5.4", Err(Refusal::Private), Ok(())),
            ("192.168.1.1", Err(Refusal::Private), Ok(())),
            ("100.64.0.1", Err(Refusal::Private), Ok(())),
            ("::ffff:10.1.2.3", Err(Refusal::Private), Ok(())),
            ("fd00::1", Err(Refusal::Private), Ok(())),
            ("100.100.100.200", Err(Refusal::Metadata), Err(Refusal::Metadata)),
            ("::ffff:100.100.100.200", Err(Refusal::Metadata), Err(Refusal::Metadata)),
            ("fd00:ec2::254", Err(Refusal::Metadata), Err(Refusal::Metadata)),
            ("fd00:ec2::23", Err(Refusal::Metadata), Err(Refusal::Metadata)),
            ("fd00:ec3::23", Err(Refusal::Private), Ok(())),
            ("169.254.169.254", Err(Refusal::LinkLocal), Err(Refusal::LinkLocal)),
            ("::ffff:169.254.169.254", Err(Refusal::LinkLocal), Err(Refusal::LinkLocal)),
            ("fe80::1", Err(Refusal::LinkLocal), Err(Refusal::LinkLocal)),
            ("0.0.0.0", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("::", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("255.255.255.255", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("224.0.0.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("192.0.2.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("198.18.0.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("240.0.0.1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("2001:db8::1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("2002:7f00:1::", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("64:ff9b::7f00:1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
            ("ff02::1", Err(Refusal::Reserved), Err(Refusal::Reserved)),
        ];
        for (ip, strictly, laxly) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(check_ip(ip, strict), *strictly, "{ip} strict");
            assert_eq!(check_ip(ip, lax), *laxly, "{ip} lax");
        }
    }

    #[test]
    fn endpoint_urls_are_https_with_a_host_and_no_credentials() {
        let strict = AddressPolicy::default();
        let dev = AddressPolicy { allow_loopback: true, allow_private: false };
        let cases: &[Case] = &[
            ("https://hooks.example.com/in", Ok(()), Ok(())),
            ("http://hooks.example.com/in", Err(Refusal::NotHttps), Err(Refusal::NotHttps)),
            ("http://127.0.0.1:9000/in", Err(Refusal::NotHttps), Ok(())),
            ("http://localhost:9000/in", Err(Refusal::NotHttps), Ok(())),
            ("http://LocalHost.:9000/in", Err(Refusal::NotHttps), Ok(())),
            ("http://api.localhost:9000/in", Err(Refusal::NotHttps), Ok(())),
            ("http://localhost.example.com:9000/in", Err(Refusal::NotHttps), Err(Refusal::NotHttps)),
            ("http://notlocalhost:9000/in", Err(Refusal::NotHttps), Err(Refusal::NotHttps)),
            ("https://2130706433/in", Err(Refusal::Loopback), Ok(())),
            ("https://0x7f.1/in", Err(Refusal::Loopback), Ok(())),
            ("https://0177.0.0.1/in", Err(Refusal::Loopback), Ok(())),
            ("https://167772161/in", Err(Refusal::Private), Err(Refusal::Private)),
            ("http://[::1]:9000/in", Err(Refusal::NotHttps), Ok(())),
            ("https://127.0.0.1/in", Err(Refusal::Loopback), Ok(())),
            ("https://10.0.0.5/in", Err(Refusal::Private), Err(Refusal::Private)),
            ("https://[::ffff:a9fe:a9fe]/latest", Err(Refusal::LinkLocal), Err(Refusal::LinkLocal)),
            ("https://user:pw@hooks.example.com/", Err(Refusal::BadUrl), Err(Refusal::BadUrl)),
            ("ftp://hooks.example.com/", Err(Refusal::NotHttps), Err(Refusal::NotHttps)),
            ("http://10.0.0.5/in", Err(Refusal::NotHttps), Err(Refusal::NotHttps)),
        ];
        for (url, strictly, in_dev) in cases {
            let u = Url::parse(url).unwrap();
            assert_eq!(check_url(&u, strict), *strictly, "{url} strict");
            assert_eq!(check_url(&u, dev), *in_dev, "{url} dev");
        }
    }

    /// Answers every name with the addresses given.
    struct Fixed(Vec<IpAddr>);

    impl Lookup for Fixed {
        fn lookup(&self, _: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
            let found = self.0.clone();
            Box::pin(async move { Ok(found) })
        }
    }

    #[tokio::test]
    async fn localhost_reaches_loopback_addresses_only_whatever_it_resolves_to() {
        use reqwest::dns::Resolve;
        let lax = AddressPolicy { allow_loopback: true, allow_private: true };
        let ips = |s: &[&str]| s.iter().map(|a| a.parse().unwrap()).collect::<Vec<IpAddr>>();
        let resolve = |found: Vec<IpAddr>, name: &'static str| {
            let r = GuardedResolver::new(Arc::new(Fixed(found)), lax);
            async move {
                r.resolve(name.parse().unwrap())
                    .await
                    .map(|a| a.map(|s| s.ip().to_string()).collect::<Vec<_>>())
                    .map_err(|e| e.to_string())
            }
        };
        assert_eq!(resolve(ips(&["127.0.0.1", "::1"]), "localhost").await.unwrap(), ["127.0.0.1", "::1"]);
        assert_eq!(resolve(ips(&["10.0.0.7", "127.0.0.1"]), "localhost").await.unwrap(), ["127.0.0.1"]);
        assert!(resolve(ips(&["10.0.0.7"]), "localhost").await.is_err(), "a private address for localhost");
        assert!(resolve(ips(&["10.0.0.7"]), "a.localhost").await.is_err());
        // Another name reaches what the policy allows.
        assert_eq!(resolve(ips(&["10.0.0.7"]), "internal.example").await.unwrap(), ["10.0.0.7"]);
    }

    #[tokio::test]
    async fn a_configured_localhost_is_loopback_without_a_lookup() {
        use reqwest::dns::Resolve;
        // A lookup that would send it elsewhere (a DNS server answering for `localhost`).
        let r = LoopbackPinned::new(Arc::new(Fixed(vec!["203.0.113.9".parse().unwrap()])));
        let got = |name: &'static str| {
            let r = &r;
            async move { r.resolve(name.parse().unwrap()).await.unwrap().map(|s| s.ip().to_string()).collect::<Vec<_>>() }
        };
        assert_eq!(got("localhost").await, ["127.0.0.1", "::1"]);
        assert_eq!(got("api.localhost").await, ["127.0.0.1", "::1"]);
        assert_eq!(got("idp.example").await, ["203.0.113.9"], "other names as the system resolves them");
    }
}
