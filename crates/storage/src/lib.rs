//! The Azure Storage REST client: connections (strings or identities), Shared Key, SAS and
//! bearer token authorization, the Table, Queue and Blob operations tablescan needs, typed
//! entities, OData filters and retries.
//!
//! This layer knows HTTP and the Storage wire format, and nothing of scans or Functions.

mod authorize;
pub mod blob;
pub mod connection;
pub mod connection_string;
pub mod credential;
pub mod deadline;
pub mod encoding;
pub mod error;
pub mod names;
pub mod pacing;
mod pipeline;
pub mod queue;
pub mod reason;
pub mod retry;
pub mod sas;
pub mod signing;
pub mod table;
pub mod throttled;
pub mod token;

pub use authorize::TableAuthScheme;
pub use blob::{BlobServiceClient, ContainerClient};
pub use connection::{ConnectionError, SettingLookup};
pub use connection_string::{ConnectionStringError, StorageAccount};
pub use error::{ErrorKind, ServiceError, StorageError};
pub use pipeline::{ClientOptions, SERVICE_VERSION};
pub use queue::{QueueClient, QueueServiceClient};
pub use reason::{Missing, Reason};
pub use table::{TableClient, TableServiceClient};
