//! The HelloStateful API: the custom resource, its defaults, the names and labels of its
//! children, the on-demand annotation keys, the data mover's summaries, and the object store
//! endpoints an admin allows. The plugin and the reconciler both build on this crate and on
//! nothing of each other.

pub mod defaults;
pub mod endpoints;
pub mod names;
pub mod quantity;
mod resource;
pub mod summary;
pub mod validate;

pub use resource::*;
