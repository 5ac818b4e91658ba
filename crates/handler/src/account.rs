//! Which storage account, and which of its services, an endpoint URL reaches: what the guard
//! compares (`functions::guard`), because one account answers at many URLs. The same account's
//! Table service is `https://acct.table.core.windows.net`, the same with another case, a
//! trailing slash, `:443`, `http://`, the `-secondary` or `privatelink` name, or the endpoint a
//! connection string makes from `AccountName` and `EndpointSuffix`; and the emulator's is
//! `http://127.0.0.1:10002/devstoreaccount1`, `http://localhost:10002/devstoreaccount1/`, or
//! `http://devstoreaccount1.table.localhost:10002`.

use super::reach::Service;

/// The labels that name a service in a host of the form `<account>.<service>.<suffix>`.
const SERVICE_LABELS: [&str; 5] = ["table", "queue", "blob", "dfs", "file"];

/// One service of one account, as the guard compares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountService {
    pub service: Service,
    /// The account's name in lower case. For an endpoint that shows no account name (a custom
    /// domain without a path), its host stands for it.
    pub account: String,
}

impl AccountService {
    /// The account behind `endpoint`, a service's base URL; `service` says which service it
    /// is (a path-style URL does not show it).
    pub fn of(service: Service, endpoint: &str) -> AccountService {
        AccountService {
            service,
            account: account_name(endpoint),
        }
    }
}

/// The account an endpoint reaches: the first label of a host `<account>.<service>.<suffix>`
/// (Azure's form, any cloud or suffix), else the first path segment (the emulator's path
/// style, whatever its host: an IP address, `localhost`, a container's name), else the host.
/// Scheme, port, case and trailing slashes do not matter.
fn account_name(endpoint: &str) -> String {
    let text = endpoint.trim();
    let Ok(url) = reqwest::Url::parse(text) else {
        return text.trim_end_matches('/').to_ascii_lowercase();
    };
    if let Some(host) = url.domain() {
        let labels: Vec<String> = host
            .split('.')
            .map(|label| label.to_ascii_lowercase())
            .collect();
        let service_at = |i: usize| {
            labels
                .get(i)
                .is_some_and(|l| SERVICE_LABELS.contains(&l.as_str()))
        };
        let virtual_host =
            labels.len() >= 3 && (service_at(1) || (labels[1] == "privatelink" && service_at(2)));
        if virtual_host {
            let account = &labels[0];
            // The read-only secondary of a geo-redundant account is the same account.
            return account
                .strip_suffix("-secondary")
                .unwrap_or(account)
                .to_string();
        }
    }
    if let Some(first) = url
        .path_segments()
        .and_then(|mut segments| segments.next())
        .filter(|segment| !segment.is_empty())
    {
        return first.to_ascii_lowercase();
    }
    url.host_str().unwrap_or_default().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_of_an_account_names_it_and_other_accounts_stay_apart() {
        for (endpoint, account) in [
            ("https://acct.table.core.windows.net", "acct"),
            ("HTTP://Acct.Table.Core.Windows.Net:80/", "acct"),
            ("https://acct-secondary.table.core.windows.net", "acct"),
            ("https://acct.privatelink.table.core.windows.net", "acct"),
            ("https://acct.table.core.chinacloudapi.cn", "acct"),
            ("https://acct.table.local.azurestack.external:443/", "acct"),
            (
                "http://127.0.0.1:10002/devstoreaccount1",
                "devstoreaccount1",
            ),
            ("http://[::1]:10002/DevStoreAccount1/", "devstoreaccount1"),
            ("http://azurite:10002/devstoreaccount1", "devstoreaccount1"),
            (
                "http://devstoreaccount1.table.localhost:10002",
                "devstoreaccount1",
            ),
            ("https://storage.example.com/", "storage.example.com"),
            ("https://storage.example.com:8443", "storage.example.com"),
            ("not a url/", "not a url"),
        ] {
            assert_eq!(account_name(endpoint), account, "{endpoint}");
        }
        assert_ne!(
            AccountService::of(Service::Table, "https://acct.table.core.windows.net"),
            AccountService::of(Service::Queue, "https://acct.queue.core.windows.net"),
            "another service of the account"
        );
    }
}
