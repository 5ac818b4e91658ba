//! Account shared access signatures (Constructing an Account SAS, version 2020-12-06 and later).
//!
//! tablescan mostly consumes SAS tokens that users hand it; generating one is here so that a
//! least-privilege token can be minted from an account key (and so that tests can check the SAS
//! path end to end against the emulator).

use time::{format_description::well_known::Rfc3339, OffsetDateTime};

use super::credential::{AccountKey, SasToken};
use super::encoding::encode_component;
use super::signing::sign;

/// The SAS version we sign; it needs the `ses` (encryption scope) line.
const SAS_VERSION: &str = "2021-06-08";

/// What an account SAS allows.
#[derive(Debug, Clone)]
pub struct AccountSas {
    /// Permissions, a subset of `rwdlacup` in that order.
    pub permissions: String,
    /// Services, a subset of `bqtf` in that order.
    pub services: String,
    /// Resource types, a subset of `sco` in that order.
    pub resource_types: String,
    /// When the token stops working.
    pub expiry: OffsetDateTime,
    /// `https` or `https,http`.
    pub protocol: &'static str,
}

impl AccountSas {
    /// Signs the token with the account key.
    pub fn sign(&self, account: &str, key: &AccountKey) -> SasToken {
        let expiry = self
            .expiry
            .to_offset(time::UtcOffset::UTC)
            .replace_nanosecond(0)
            .expect("zero nanoseconds is valid")
            .format(&Rfc3339)
            .expect("a UTC time formats as RFC 3339");
        let string_to_sign = format!(
            "{account}\n{}\n{}\n{}\n\n{expiry}\n\n{}\n{SAS_VERSION}\n\n",
            self.permissions, self.services, self.resource_types, self.protocol
        );
        let signature = sign(key, &string_to_sign);
        let query = format!(
            "sv={SAS_VERSION}&ss={}&srt={}&sp={}&se={}&spr={}&sig={}",
            self.services,
            self.resource_types,
            self.permissions,
            encode_component(&expiry),
            encode_component(self.protocol),
            encode_component(&signature)
        );
        SasToken::parse(&query).expect("the token has a signature")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection_string::{EMULATOR_ACCOUNT, EMULATOR_KEY};

    #[test]
    fn token_carries_every_field_with_the_signature_encoded() {
        let sas = AccountSas {
            permissions: "rwdlacup".into(),
            services: "qt".into(),
            resource_types: "sco".into(),
            expiry: time::macros::datetime!(2030-01-01 00:00:00 UTC),
            protocol: "https,http",
        };
        let token = sas.sign(
            EMULATOR_ACCOUNT,
            &AccountKey::from_base64(EMULATOR_KEY).unwrap(),
        );
        let query = token.query();
        assert!(query.starts_with(
            "sv=2021-06-08&ss=qt&srt=sco&sp=rwdlacup&se=2030-01-01T00%3A00%3A00Z&spr=https%2Chttp&sig="
        ));
        let sig = query.rsplit("sig=").next().unwrap();
        assert!(
            !sig.contains('+') && !sig.contains('/') && !sig.contains('='),
            "{sig}"
        );
    }
}
