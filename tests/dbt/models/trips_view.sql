-- A view model over the table model (ref()).
{{ config(materialized='view') }}
select trip_id, city, service_client_id
from {{ ref('trips_by_client') }}
