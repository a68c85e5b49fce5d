-- A table model over the view model (ref() of a view).
{{ config(materialized='table') }}
select city, service_client_id, count(*) as trips
from {{ ref('trips_view') }}
group by city, service_client_id
