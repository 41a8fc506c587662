//! The SSRF guard: which addresses `web_fetch` may connect to.
//!
//! A model can be asked (or tricked, by a page it read) to fetch `http://127.0.0.1:18789/`,
//! `http://169.254.169.254/latest/meta-data/` or a router on the LAN. Unless
//! `tools.web.allow_private` is on, every address that is not a public unicast one is refused,
//! and the check sits where it cannot be raced:
//!
//! - host names are resolved by [`GuardedResolver`], reqwest's DNS resolver for the fetch
//!   client: it drops refused addresses from the answer, so the connection can only be made to
//!   an address that was vetted. There is no check-then-connect gap for DNS rebinding to use
//!   (a name answering a public address to a pre-check and a private one to the connect);
//! - IP-literal hosts never reach a resolver, so [`check_host`] vets them before the first
//!   request and before every redirect hop.
//!
//! [`classify`] is the one place that decides what an address is.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Why an address is not public. Its `Display` is the phrase used in refusals: "… resolves to
/// 127.0.0.1, a loopback address; …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// `0.0.0.0`, `::`: "this host" to most stacks, so effectively loopback.
    Unspecified,
    /// `0.0.0.0/8` other than `0.0.0.0` (RFC 1122 "this network").
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`; and the deprecated IPv6 site-local `fec0::/10`.
    Private,
    /// `100.64.0.0/10` (RFC 6598), carrier-grade NAT: inside a provider's network.
    SharedAddressSpace,
    /// `fc00::/7` (RFC 4193) and the local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215).
    UniqueLocal,
    /// `169.254.0.0/16` (where cloud metadata services answer, 169.254.169.254) and `fe80::/10`.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24` (RFC 5737), `2001:db8::/32` (RFC 3849) and
    /// `3fff::/20` (RFC 9637): never routed.
    Documentation,
    /// `198.18.0.0/15` (RFC 2544), `2001:2::/48` (RFC 5180).
    Benchmarking,
    /// `192.0.0.0/24` (IETF protocol assignments), `240.0.0.0/4` (future use), `100::/64`
    /// (discard-only) and the rest of `::/96` (deprecated IPv4-compatible addresses).
    Reserved,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::ThisNetwork => "a \"this network\" address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private address",
            AddressClass::SharedAddressSpace => "a shared (carrier-grade NAT) address",
            AddressClass::UniqueLocal => "a unique local (private IPv6) address",
            AddressClass::LinkLocal => "a link-local address (the range of cloud metadata services)",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Broadcast => "the broadcast address",
            AddressClass::Documentation => "a documentation address",
            AddressClass::Benchmarking => "a benchmarking address",
            AddressClass::Reserved => "a reserved address",
        })
    }
}

/// What `address` is when it is not public unicast, or `None` when it is. An IPv6 address that
/// embeds an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64
/// `64:ff9b::/96`, 6to4 `2002::/16`) is judged by the IPv4 address it leads to.
pub fn classify(address: IpAddr) -> Option<AddressClass> {
    match address {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(address: Ipv4Addr) -> Option<AddressClass> {
    let [a, b, c, _] = address.octets();
    let class = match (a, b, c) {
        _ if address.is_unspecified() => AddressClass::Unspecified,
        _ if address.is_broadcast() => AddressClass::Broadcast,
        (0, _, _) => AddressClass::ThisNetwork,
        (127, _, _) => AddressClass::Loopback,
        (10, _, _) | (192, 168, _) => AddressClass::Private,
        (172, 16..=31, _) => AddressClass::Private,
        (100, 64..=127, _) => AddressClass::SharedAddressSpace,
        (169, 254, _) => AddressClass::LinkLocal,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => AddressClass::Documentation,
        (198, 18..=19, _) => AddressClass::Benchmarking,
        (192, 0, 0) => AddressClass::Reserved,
        (224..=239, _, _) => AddressClass::Multicast,
        (240..=255, _, _) => AddressClass::Reserved,
        _ => return None,
    };
    Some(class)
}

fn classify_v6(address: Ipv6Addr) -> Option<AddressClass> {
    if let Some(v4) = embedded_v4(address) {
        return classify_v4(v4);
    }
    let segments = address.segments();
    let class = match segments {
        _ if address.is_unspecified() => AddressClass::Unspecified,
        _ if address.is_loopback() => AddressClass::Loopback,
        // The rest of ::/96: deprecated IPv4-compatible addresses ([`embedded_v4`] left alone
        // those that would name the unspecified or loopback address).
        [0, 0, 0, 0, 0, 0, _, _] => AddressClass::Reserved,
        [0x64, 0xff9b, 1, ..] => AddressClass::UniqueLocal,
        [0x100, 0, 0, 0, ..] => AddressClass::Reserved,
        [0x2001, 0xdb8, ..] => AddressClass::Documentation,
        [0x2001, 2, 0, ..] => AddressClass::Benchmarking,
        [first, ..] if first & 0xfff0 == 0x3ff0 => AddressClass::Documentation,
        [first, ..] if first & 0xfe00 == 0xfc00 => AddressClass::UniqueLocal,
        [first, ..] if first & 0xffc0 == 0xfe80 => AddressClass::LinkLocal,
        [first, ..] if first & 0xffc0 == 0xfec0 => AddressClass::Private,
        [first, ..] if first & 0xff00 == 0xff00 => AddressClass::Multicast,
        _ => return None,
    };
    Some(class)
}

/// The IPv4 address an IPv6 one stands for, where a host or a translator would reach it.
fn embedded_v4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = address.segments();
    let octets = address.octets();
    let last_32 = Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    match segments {
        // IPv4-mapped ::ffff:a.b.c.d: sockets on a dual-stack host connect to a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(last_32),
        // IPv4-compatible ::a.b.c.d, but not :: and ::1 themselves.
        [0, 0, 0, 0, 0, 0, high, _] if high != 0 => Some(last_32),
        // NAT64's well-known prefix (RFC 6052): a translator connects to a.b.c.d.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last_32),
        // 6to4 (RFC 3056): 2002:AABB:CCDD::/48 is relayed to AA.BB.CC.DD.
        [0x2002, ..] => Some(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5])),
        _ => None,
    }
}

/// A fetch refused for where it would go. Its message is what the model reads: the host, the
/// address, its class and the setting that would allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The host as the URL named it.
    pub host: String,
    /// The refused address (the first one, when a name resolved to several).
    pub address: IpAddr,
    pub class: AddressClass,
    /// The URL named the address itself rather than a host name.
    pub literal: bool,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { host, address, class, literal } = self;
        if *literal {
            write!(f, "{host} is {class}")?;
        } else {
            write!(f, "{host} resolves to {address}, {class}")?;
        }
        f.write_str("; fetching private addresses is off (tools.web.allow_private)")
    }
}

impl std::error::Error for Refused {}

/// Which addresses a fetch may reach: public ones only, or everything
/// (`tools.web.allow_private`). Tests may also name loopback addresses that stand in for
/// public hosts ([`AddressPolicy::treating_as_public`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow_private: bool,
    /// Addresses treated as public whatever [`classify`] says.
    public_stand_ins: Vec<IpAddr>,
}

impl AddressPolicy {
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private, public_stand_ins: Vec::new() }
    }

    /// Treats `addresses` as public. For tests, which have only loopback servers: one of them
    /// (say on 127.0.0.2) stands in for a public site, so that what the guard does next (a
    /// redirect to 127.0.0.1) can be tested. Not reachable from the config.
    pub fn treating_as_public(mut self, addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        self.public_stand_ins.extend(addresses);
        self
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// Why `address` may not be reached, or `None` when it may.
    pub fn refusal(&self, address: IpAddr) -> Option<AddressClass> {
        if self.allow_private || self.public_stand_ins.contains(&address) {
            return None;
        }
        classify(address)
    }
}

/// Vets the host of `url` when it is an IP address (those bypass the resolver); host names
/// pass, since [`GuardedResolver`] vets what they resolve to.
pub fn check_host(url: &Url, policy: &AddressPolicy) -> Result<(), Refused> {
    let address = match url.host() {
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
        // The URL parser turns every IPv4 spelling (decimal, hex, octal) into Host::Ipv4.
        Some(Host::Domain(_)) | None => return Ok(()),
    };
    match policy.refusal(address) {
        Some(class) => Err(Refused { host: host_text(url), address, class, literal: true }),
        None => Ok(()),
    }
}

fn host_text(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_owned()
}

/// Looks host names up. The system resolver in production; a fixed table in tests, so a
/// "public-looking" name can be made to answer a loopback address.
pub trait Lookup: Send + Sync + 'static {
    fn lookup(&self, host: String) -> futures::future::BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio's blocking pool).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> futures::future::BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addresses = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addresses.map(|address| address.ip()).collect())
        })
    }
}

/// Fixed answers by host name; any other name is not found. For tests.
#[derive(Debug, Clone, Default)]
pub struct StaticLookup {
    hosts: BTreeMap<String, Vec<IpAddr>>,
}

impl StaticLookup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `host` (case-insensitively) with `addresses`.
    pub fn with(mut self, host: &str, addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        self.hosts.insert(host.to_ascii_lowercase(), addresses.into_iter().collect());
        self
    }
}

impl Lookup for StaticLookup {
    fn lookup(&self, host: String) -> futures::future::BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let found = self.hosts.get(&host.to_ascii_lowercase()).cloned();
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host} is not known")))
        })
    }
}

/// reqwest's DNS resolver for `web_fetch`: looks names up with a [`Lookup`] and keeps only the
/// addresses the policy allows. A name with none left fails with [`Refused`], which reqwest
/// carries as the source of its connect error.
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
    policy: AddressPolicy,
}

impl GuardedResolver {
    pub fn new(lookup: Arc<dyn Lookup>, policy: AddressPolicy) -> Self {
        Self { lookup, policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let lookup = self.lookup.lookup(host.clone());
        let policy = self.policy.clone();
        Box::pin(async move {
            let found = lookup.await?;
            let (allowed, refused) = vet(&found, &policy);
            if allowed.is_empty() {
                if let Some((address, class)) = refused {
                    tracing::debug!(%host, %address, "web_fetch refused a host that resolves to a non-public address");
                    return Err(Box::new(Refused { host, address, class, literal: false }) as _);
                }
                return Err(format!("{host} resolved to no address").into());
            }
            // Port 0: reqwest puts the URL's port (or the scheme's) in its place.
            let addresses: Addrs = Box::new(allowed.into_iter().map(|address| SocketAddr::new(address, 0)));
            Ok(addresses)
        })
    }
}

/// The addresses `policy` allows, in order, and the first one it refused (with why).
fn vet(found: &[IpAddr], policy: &AddressPolicy) -> (Vec<IpAddr>, Option<(IpAddr, AddressClass)>) {
    let mut allowed = Vec::new();
    let mut refused = None;
    for &address in found {
        match policy.refusal(address) {
            None => allowed.push(address),
            Some(class) => {
                refused.get_or_insert((address, class));
            }
        }
    }
    (allowed, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> Option<AddressClass> {
        classify(text.parse().unwrap())
    }

    #[test]
    fn web_every_ipv4_class_is_recognised() {
        use AddressClass::*;
        let cases = [
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(ThisNetwork)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("192.168.1.1", Some(Private)),
            ("100.64.0.1", Some(SharedAddressSpace)),
            ("100.127.255.255", Some(SharedAddressSpace)),
            ("169.254.169.254", Some(LinkLocal)),
            ("169.254.0.1", Some(LinkLocal)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("192.0.2.1", Some(Documentation)),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.9", Some(Documentation)),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("192.0.0.8", Some(Reserved)),
            ("240.0.0.1", Some(Reserved)),
            // Public, including the neighbours of each range.
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("169.253.255.255", None),
            ("198.17.255.255", None),
            ("198.20.0.0", None),
            ("192.0.3.1", None),
            ("223.255.255.255", None),
        ];
        for (address, expected) in cases {
            assert_eq!(class(address), expected, "{address}");
        }
    }

    #[test]
    fn web_every_ipv6_class_is_recognised() {
        use AddressClass::*;
        let cases = [
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("64:ff9b:1::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("fec0::1", Some(Private)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("3fff::1", Some(Documentation)),
            ("2001:2::1", Some(Benchmarking)),
            ("100::1", Some(Reserved)),
            ("2001:4860:4860::8888", None),
            ("2606:4700::1111", None),
            ("fbff::1", None),
        ];
        for (address, expected) in cases {
            assert_eq!(class(address), expected, "{address}");
        }
    }

    #[test]
    fn web_ipv6_addresses_that_embed_ipv4_are_judged_by_it() {
        use AddressClass::*;
        assert_eq!(class("::ffff:127.0.0.1"), Some(Loopback));
        assert_eq!(class("::ffff:169.254.169.254"), Some(LinkLocal));
        assert_eq!(class("::ffff:10.1.2.3"), Some(Private));
        assert_eq!(class("::ffff:0.0.0.0"), Some(Unspecified));
        assert_eq!(class("::ffff:8.8.8.8"), None);
        assert_eq!(class("::127.0.0.1"), Some(Loopback), "IPv4-compatible");
        assert_eq!(class("::8.8.8.8"), None);
        assert_eq!(class("64:ff9b::192.168.0.1"), Some(Private), "NAT64");
        assert_eq!(class("64:ff9b::8.8.8.8"), None);
        assert_eq!(class("2002:7f00:1::"), Some(Loopback), "6to4 of 127.0.0.1");
        assert_eq!(class("2002:0808:0808::"), None);
    }

    #[test]
    fn web_every_refusal_names_its_class() {
        let refused = Refused {
            host: "localhost".into(),
            address: "127.0.0.1".parse().unwrap(),
            class: AddressClass::Loopback,
            literal: false,
        };
        assert_eq!(
            refused.to_string(),
            "localhost resolves to 127.0.0.1, a loopback address; fetching private addresses is off \
             (tools.web.allow_private)"
        );
        let literal = Refused {
            host: "169.254.169.254".into(),
            address: "169.254.169.254".parse().unwrap(),
            class: AddressClass::LinkLocal,
            literal: true,
        };
        assert_eq!(
            literal.to_string(),
            "169.254.169.254 is a link-local address (the range of cloud metadata services); fetching \
             private addresses is off (tools.web.allow_private)"
        );
    }

    #[test]
    fn web_ip_literal_hosts_are_checked_in_every_spelling() {
        let policy = AddressPolicy::new(false);
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::ffff:127.0.0.1]:8080/",
            "http://[::1]/",
            "http://169.254.169.254/latest/meta-data/",
            "https://10.0.0.1/",
        ] {
            let url = Url::parse(url).unwrap();
            assert!(check_host(&url, &policy).is_err(), "{url}");
        }
        assert_eq!(check_host(&Url::parse("http://8.8.8.8/").unwrap(), &policy), Ok(()));
        assert_eq!(check_host(&Url::parse("http://localhost/").unwrap(), &policy), Ok(()), "left to the resolver");
        assert_eq!(check_host(&Url::parse("http://127.0.0.1/").unwrap(), &AddressPolicy::new(true)), Ok(()));
        let refused = check_host(&Url::parse("http://[::1]:9/").unwrap(), &policy).unwrap_err();
        assert_eq!((refused.host.as_str(), refused.class), ("[::1]", AddressClass::Loopback));
    }

    #[test]
    fn web_stand_ins_are_public_only_for_the_policy_that_names_them() {
        let stand_in: IpAddr = "127.0.0.2".parse().unwrap();
        let policy = AddressPolicy::new(false).treating_as_public([stand_in]);
        assert_eq!(policy.refusal(stand_in), None);
        assert_eq!(policy.refusal("127.0.0.1".parse().unwrap()), Some(AddressClass::Loopback));
    }

    #[tokio::test]
    async fn web_the_resolver_keeps_only_allowed_addresses() {
        let lookup = StaticLookup::new()
            .with("mixed.example", ["10.0.0.1".parse().unwrap(), "93.184.215.14".parse().unwrap()])
            .with("inside.example", ["192.168.0.10".parse().unwrap(), "127.0.0.1".parse().unwrap()]);
        let resolver = GuardedResolver::new(Arc::new(lookup), AddressPolicy::new(false));
        let addresses: Vec<SocketAddr> = resolver.resolve("mixed.example".parse().unwrap()).await.unwrap().collect();
        assert_eq!(addresses, [SocketAddr::from(([93, 184, 215, 14], 0))]);

        let error = resolver.resolve("inside.example".parse().unwrap()).await.err().expect("refused");
        let refused = error.downcast_ref::<Refused>().expect("a Refused");
        assert_eq!(refused.address, "192.168.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(refused.class, AddressClass::Private);
        assert!(!refused.literal);

        let open = GuardedResolver::new(
            Arc::new(StaticLookup::new().with("inside.example", ["127.0.0.1".parse().unwrap()])),
            AddressPolicy::new(true),
        );
        assert_eq!(open.resolve("inside.example".parse().unwrap()).await.unwrap().count(), 1);
    }
}
