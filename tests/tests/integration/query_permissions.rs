//! Query permissions over HTTP: each role against each database kind, reads
//! across service clients, and the Zone API's own lake and roles.
