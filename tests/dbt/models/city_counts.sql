-- A table model over the view model (ref() of a view).
{{ config(materialized='table') }}
select city, count(*) as trips, service_client_id
from {{ ref('trips_view') }}
group by city, service_client_id
