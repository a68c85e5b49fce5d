-- A table model over a source. service_client_id is last: a table made by
-- SQL lists it last whatever the statement's order (docs/compatibility.md).
{{ config(materialized='table') }}
select trip_id, city, fare, service_client_id
from {{ source('lake', 'rides') }}
