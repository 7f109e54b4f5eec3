"""Intent x Fabric x History -> the neutral layout every target renders from."""
