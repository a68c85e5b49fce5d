-- A table model over a source. service_client_id is in the middle: a table
-- made by SQL keeps its statement's column order (partition column or not).
{{ config(materialized='table') }}
select trip_id, service_client_id, city, fare
from {{ source('lake', 'rides') }}
